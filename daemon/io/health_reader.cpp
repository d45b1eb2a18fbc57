#include "io/health_reader.hpp"

#include "core/pci_paths.hpp"
#include "core/strings.hpp"

namespace vfiod {

namespace {

// A totals file is a few hundred bytes; more is not the kernel's.
constexpr size_t kMaxAerFile = 4096;

struct AerFile {
    const char* leaf;
    const char* kind;
    uint64_t AerTotals::*count;
};
constexpr AerFile kAerFiles[] = {
    {"aer_dev_correctable", "COR", &AerTotals::correctable},
    {"aer_dev_nonfatal", "NONFATAL", &AerTotals::nonfatal},
    {"aer_dev_fatal", "FATAL", &AerTotals::fatal},
};

void read_totals(const HostFs& fs, const PciAddress& a, HealthReading* r) {
    AerTotals t;
    size_t missing = 0;
    for (const AerFile& f : kAerFiles) {
        std::string why;
        auto text = fs.read(pci_paths::device(a, f.leaf), kMaxAerFile, &why);
        if (!text) {
            if (!why.empty() && r->unreadable.empty())
                r->unreadable = std::string(f.leaf) + ": " + why;
            missing += why.empty();
            continue;
        }
        auto n = aer_total(*text, f.kind);
        if (!n) {
            if (r->unreadable.empty())
                r->unreadable = std::string(f.leaf) + " has no TOTAL_ERR_" + f.kind + " count";
            continue;
        }
        t.*f.count = *n;
    }
    // No file at all: the function has no AER capability (unreadable stays ""). Some but not
    // all: a host that is not the kernel's.
    if (missing == std::size(kAerFiles))
        return;
    if (missing && r->unreadable.empty())
        r->unreadable = "some aer_dev_* files are missing";
    if (r->unreadable.empty())
        r->totals = t;
}

}  // namespace

HealthReading read_health(const HostFs& fs, const PciAddress& a, const std::string* original) {
    HealthReading r;
    read_totals(fs, a, &r);
    // The config header's first three dwords, read from the device now (the sysfs vendor file
    // is a value cached at enumeration). A function that is gone answers every config read with
    // all ones. The vendor and device IDs alone do not say it: an SR-IOV VF's read all ones by
    // the PCIe spec (the kernel takes them from the PF), while its class dword is real.
    auto config = fs.read(pci_paths::device(a, "config"), 12);
    r.gone = config && *config == std::string(12, '\xff');
    if (original && !original->empty() && fs.exists(pci_paths::driver(*original))) {
        std::string now = fs.link_name(pci_paths::driver_link(a)).value_or("");
        if (now != *original)
            r.quarantine = printable(*original) + " did not take it back after the release (" +
                           (now.empty() ? std::string("no driver") : "on " + printable(now)) +
                           ")";
    }
    if (original && r.gone)
        r.quarantine = "config space reads all ones after the release";
    return r;
}

}  // namespace vfiod
