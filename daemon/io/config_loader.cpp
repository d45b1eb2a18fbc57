#include "config_loader.hpp"

#include <filesystem>

#include "core/config_checks.hpp"
#include "io/config_files.hpp"
#include "io/config_schema.hpp"
#include "io/host_fs.hpp"

namespace vfiod {

namespace {

namespace fs = std::filesystem;

ConfigResult finish(Config&& c, std::vector<std::string>&& errors,
                    std::vector<std::string>&& warnings) {
    ConfigResult r;
    if (errors.empty())
        check_resource_names(c, errors);
    if (errors.empty())
        check_mdev_entries(c, errors);
    if (errors.empty()) {
        warn_overlaps(c, warnings);
        r.config = std::move(c);
    }
    r.errors = std::move(errors);
    r.warnings = std::move(warnings);
    return r;
}

ConfigResult internal_error(const std::string& name, const char* what) {
    ConfigResult r;
    r.errors.push_back(name + ": internal error: " + what);
    return r;
}

// One load: the main file at `main` (a path as `from` takes it), then the conf.d beside it.
ConfigResult load_files(const ConfigSource& from, const std::string& main, bool explicit_file) {
    const std::string shown_main = from.shown(main);
    try {
        std::vector<std::string> errors, warnings;
        Config c;
        auto load = [&](const std::string& p, bool may_be_missing) {
            const std::string name = from.shown(p);
            std::string text, why;
            switch (from.read(p, &text, &why)) {
            case ReadStatus::Missing:
                if (!may_be_missing)
                    errors.push_back(name + ": cannot read: not found");
                return false;
            case ReadStatus::Failed:
                errors.push_back(name + ": " + why);
                return false;
            case ReadStatus::Ok:
                break;
            }
            if (auto f = parse_fragment(text, name, errors))
                merge_fragment(std::move(*f), c);
            c.files.push_back(name);
            return true;
        };
        const bool found = load(main, !explicit_file);
        const auto extra =
            from.list_confd((fs::path(main).parent_path() / "conf.d").string(), errors);
        for (const auto& p : extra)
            load(p, false);
        if (!found && !explicit_file)
            warnings.push_back(shown_main + (extra.empty() ? ": not found; the allowlist is empty"
                                                           : ": not found; using conf.d only"));
        return finish(std::move(c), std::move(errors), std::move(warnings));
    } catch (const std::exception& e) {
        return internal_error(shown_main, e.what());
    } catch (...) {
        return internal_error(shown_main, "unknown exception");
    }
}

constexpr const char* kMainUnderRoot = "etc/vfiod/vfiod.toml";

}  // namespace

ConfigResult parse_config(std::string_view text, const std::string& name) {
    try {
        std::vector<std::string> errors;
        Config c;
        if (auto f = parse_fragment(text, name, errors))
            merge_fragment(std::move(*f), c);
        c.files.push_back(name);
        return finish(std::move(c), std::move(errors), {});
    } catch (const std::exception& e) {
        return internal_error(name, e.what());
    } catch (...) {
        return internal_error(name, "unknown exception");
    }
}

ConfigResult load_config(const HostFs& host, const std::optional<std::string>& file) {
    if (file)
        return load_files(ConfigSource(), *file, true);
    return load_files(ConfigSource(host), kMainUnderRoot, false);
}

ConfigResult load_config(const std::string& root, const std::optional<std::string>& file) {
    // A --config FILE needs no root: the tree is not opened for it.
    if (file)
        return load_files(ConfigSource(), *file, true);
    const KernelHostFs host(root);
    return load_files(ConfigSource(host), kMainUnderRoot, false);
}

}  // namespace vfiod
