// vfioctl bind / release: ask the daemon (D-Bus) to bind or give back a whole IOMMU group.
#include <cstdio>

#include "commands.hpp"
#include "core/pci_address.hpp"
#include "core/strings.hpp"
#include "dbus_client.hpp"

namespace vfiod::cli {

int exit_code(const client::ClientResult& r) {
    switch (r.code) {
    case client::ClientResult::Code::Ok: return kExitOk;
    case client::ClientResult::Code::Unavailable: return kExitUnavailable;
    case client::ClientResult::Code::Denied: return kExitDenied;
    case client::ClientResult::Code::InvalidArgs: return kExitUsage;
    case client::ClientResult::Code::Failed: return kExitFailed;
    }
    return kExitFailed;
}

namespace {

int ask(const char* method, const char* done, const Args& args) {
    // Checked here too so a typo gets exit 2 and a clear message without a bus round trip.
    std::string err;
    if (!PciAddress::parse(args.operand, &err)) {
        // The argument is the user's, but it may have come from anywhere (a script, a paste):
        // echo it escaped, never raw.
        std::fprintf(stderr, "vfioctl: '%s': %s\n", printable(args.operand).c_str(), err.c_str());
        return kExitUsage;
    }
    client::ClientResult r = client::call_group_method(method, args.operand);
    if (!r.ok()) {
        std::fprintf(stderr, "vfioctl: %s\n", r.message.c_str());
        return exit_code(r);
    }
    std::printf("%s: the IOMMU group of %s %s\n", args.operand.c_str(), args.operand.c_str(), done);
    return kExitOk;
}

}  // namespace

int run_bind(const Args& args) { return ask("Bind", "is bound to its pass-through driver", args); }

int run_release(const Args& args) {
    return ask("Release", "is back on its original drivers", args);
}

}  // namespace vfiod::cli
