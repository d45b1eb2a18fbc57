// vfioctl initramfs: what an initramfs carries for early binding (DESIGN §14). The hooks of
// initramfs-tools and dracut call it with --output; without, it is a dry run.
#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "commands.hpp"
#include "host_plan.hpp"
#include "initramfs.hpp"

namespace vfiod::cli {

namespace {

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char b[32];
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return b;
}

// The list file at `path`, whole or not at all. 0 or an errno.
int write_list(const std::string& path, const std::string& text) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    if (name.empty())
        return EISDIR;
    Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0)
        return errno;
    return HostFs::replace_own(fd.get(), name, text, 0644);
}

void print_set(const InitramfsRecord& r) {
    std::printf("initramfs for %s: %s\n", r.kernel.c_str(),
                r.host_check_note.empty()
                    ? "host-use check done"
                    : ("host-use check not possible (" + r.host_check_note +
                       "): matched by address and vendor:device only").c_str());
    if (r.set.carried.empty())
        std::printf("  carries no early function\n");
    for (const EarlyFunction& f : r.set.carried)
        std::printf("  carries %s %04x:%04x -> %s (%s)\n", f.address.str().c_str(), f.vendor,
                    f.device, f.driver.c_str(), f.entry.c_str());
    for (const EarlyLeftOut& l : r.set.left_out)
        std::printf("  leaves out %s (%s): %s\n",
                    l.address ? l.address->str().c_str() : "entry", l.entry.c_str(),
                    l.why.c_str());
}

}  // namespace

int run_initramfs(const Args& args) {
    if (args.kernel && !valid_kernel_version(*args.kernel)) {
        std::fprintf(stderr, "vfioctl: --kernel '%s' is not a kernel version\n",
                     args.kernel->c_str());
        return kExitUsage;
    }
    std::optional<Config> config = checked_config(args, "no list was written");
    if (!config)
        return kExitUsage;
    InitramfsRecord r;
    r.kernel = args.kernel ? *args.kernel : running_kernel();
    r.built = utc_now();
    r.config_digest = early_config_digest(*config);
    r.config_files = config->files;
    r.host_check_note = args.image ? "--image" : image_build_reason(args.root);
    const bool any_early = has_early_entries(*config);
    KernelHostFs fs(args.root);
    if (!r.host_check_note.empty()) {
        r.set = early_from_config(*config);
        if (any_early)
            std::fprintf(stderr,
                         "vfioctl: initramfs: the host-use check was not possible (%s): early "
                         "entries are matched by address and vendor:device only\n",
                         r.host_check_note.c_str());
    } else if (any_early) {  // a host without early entries is not read at all
        r.set = early_from_plan(*config, plan_host(fs, *config).plan);
    } else {
        r.set.host_checked = true;
    }
    for (const EarlyLeftOut& l : r.set.left_out)
        std::fprintf(stderr, "vfioctl: initramfs: left out %s (%s): %s\n",
                     l.address ? l.address->str().c_str() : "an entry", l.entry.c_str(),
                     l.why.c_str());
    if (!args.output) {
        if (args.json)
            std::fputs(record_json(r).c_str(), stdout);
        else
            print_set(r);
        return kExitOk;
    }
    if (int err = write_list(*args.output, early_list_text(r.set, r.kernel))) {
        std::fprintf(stderr, "vfioctl: initramfs: cannot write %s: %s\n", args.output->c_str(),
                     std::strerror(err));
        return kExitFailed;
    }
    if (!args.kernel)
        return kExitOk;
    int err = 0;
    Fd dir = fs.open_own_dir(kInitramfsRecordDir, true, &err);
    const std::string name = "initramfs-" + r.kernel + ".json";
    if (dir.get() >= 0)
        err = HostFs::replace_own(dir.get(), name, record_json(r), 0644);
    if (err)  // the list is in the image; plan and doctor will say there is no record
        std::fprintf(stderr, "vfioctl: initramfs: warning: cannot record %s/%s: %s\n",
                     kInitramfsRecordDir, name.c_str(),
                     dir.get() >= 0 ? std::strerror(err) : fs.own_dir_error(err).c_str());
    return kExitOk;
}

}  // namespace vfiod::cli
