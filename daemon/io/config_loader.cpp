#include "config_loader.hpp"

#include <filesystem>

#include "core/config_checks.hpp"
#include "io/config_files.hpp"
#include "io/config_schema.hpp"

namespace vfiod {

namespace {

namespace fs = std::filesystem;

ConfigResult finish(Config&& c, std::vector<std::string>&& errors,
                    std::vector<std::string>&& warnings) {
    ConfigResult r;
    if (errors.empty())
        check_resource_names(c, errors);
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

ConfigResult load_config(const std::string& root, const std::optional<std::string>& file) {
    const fs::path main = file ? fs::path(*file) : fs::path(root) / "etc/vfiod/vfiod.toml";
    try {
        std::vector<std::string> errors, warnings;
        Config c;
        auto load = [&](const fs::path& p, bool may_be_missing) {
            std::string text, why;
            switch (read_config_file(p, &text, &why)) {
            case ReadStatus::Missing:
                if (!may_be_missing)
                    errors.push_back(p.string() + ": cannot read: not found");
                return false;
            case ReadStatus::Failed:
                errors.push_back(p.string() + ": " + why);
                return false;
            case ReadStatus::Ok:
                break;
            }
            if (auto f = parse_fragment(text, p.string(), errors))
                merge_fragment(std::move(*f), c);
            c.files.push_back(p.string());
            return true;
        };
        const bool found = load(main, !file);
        const auto extra = list_confd(main.parent_path() / "conf.d", errors);
        for (const auto& p : extra)
            load(p, false);
        if (!found && !file)
            warnings.push_back(main.string() + (extra.empty()
                                                    ? ": not found; the allowlist is empty"
                                                    : ": not found; using conf.d only"));
        return finish(std::move(c), std::move(errors), std::move(warnings));
    } catch (const std::exception& e) {
        return internal_error(main.string(), e.what());
    } catch (...) {
        return internal_error(main.string(), "unknown exception");
    }
}

}  // namespace vfiod
