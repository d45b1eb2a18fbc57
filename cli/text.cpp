#include "text.hpp"

#include <algorithm>
#include <vector>

#include "core/plan_json.hpp"
#include "core/strings.hpp"

namespace vfiod::cli {

std::string class_name(uint32_t c) {
    struct Name {
        uint32_t prefix;
        int bits;  // how many leading bits of the 24 are compared
        const char* name;
    };
    static const Name kNames[] = {
        {0x010802, 24, "NVMe controller"}, {0x0108, 16, "NVM controller"},
        {0x0106, 16, "SATA controller"},   {0x0107, 16, "SAS controller"},
        {0x0104, 16, "RAID controller"},   {0x01, 8, "storage controller"},
        {0x0200, 16, "Ethernet controller"}, {0x0207, 16, "InfiniBand controller"},
        {0x02, 8, "network controller"},   {0x0300, 16, "VGA controller"},
        {0x0302, 16, "3D controller"},     {0x03, 8, "display controller"},
        {0x0403, 16, "audio device"},      {0x04, 8, "multimedia device"},
        {0x0600, 16, "host bridge"},       {0x0601, 16, "ISA bridge"},
        {0x0604, 16, "PCI bridge"},        {0x06, 8, "bridge"},
        {0x0c03, 16, "USB controller"},    {0x0c05, 16, "SMBus controller"},
        {0x0c, 8, "serial bus controller"}, {0x12, 8, "processing accelerator"},
    };
    for (const auto& n : kNames)
        if ((c >> (24 - n.bits)) == n.prefix)
            return n.name;
    return "class " + hex6(c);
}

namespace {

// The "why:" lines, then the writes aligned on their arrows.
std::string details_and_writes(const std::vector<std::string>& details,
                               const std::vector<Write>& writes) {
    std::string out;
    for (const auto& why : details)
        out += "  why: " + why + "\n";
    size_t w = 0;
    for (const auto& wr : writes)
        w = std::max(w, wr.path().size());
    if (!writes.empty())
        out += "  writes:\n";
    for (const auto& wr : writes) {
        std::string v = wr.value == "\n" ? "\"\\n\"" : wr.value;
        const std::string path = wr.path();
        out += "    " + path + std::string(w - path.size() + 2, ' ') + "<- " + v + "\n";
    }
    return out;
}

}  // namespace

std::string render_group(const GroupPlan& g, bool with_writes,
                         const std::optional<std::string>& state) {
    std::string out = g.group ? "group " + std::to_string(*g.group) : std::string("no group");
    out += ": " + (state ? printable(*state) : std::string(to_string(g.action)));
    if (g.reason != Reason::None)
        out += std::string(" (") + to_string(g.reason) + ")";
    out += "\n";

    struct Row {
        std::string cols[5];
    };
    std::vector<Row> rows;
    size_t width[5] = {0, 0, 0, 0, 0};
    for (const auto& d : g.devices) {
        Row r;
        r.cols[0] = d.address.str();
        r.cols[1] = hex4(d.vendor) + ":" + hex4(d.device);
        r.cols[2] = class_name(d.class_code);
        // Driver names come from the host (a link's target) or the daemon: bytes, not text.
        std::string drv = d.driver.empty() ? "(no driver)" : printable(d.driver);
        if (g.action == Action::Bind && d.target && !d.target->empty() && *d.target != d.driver)
            drv += " -> " + printable(*d.target);
        r.cols[3] = drv;
        r.cols[4] = to_string(d.role);
        if (d.resource_name)
            r.cols[4] += "  " + printable(*d.resource_name, 256);
        for (int i = 0; i < 5; ++i)
            width[i] = std::max(width[i], r.cols[i].size());
        rows.push_back(std::move(r));
    }
    for (const auto& r : rows) {
        std::string line = "  ";
        for (int i = 0; i < 5; ++i) {
            line += r.cols[i];
            if (i < 4)
                line += std::string(width[i] - r.cols[i].size() + 2, ' ');
        }
        while (!line.empty() && line.back() == ' ')
            line.pop_back();
        out += line + "\n";
    }
    out += details_and_writes(g.details, with_writes ? g.writes() : std::vector<Write>{});
    return out;
}

std::string render_pf(const PfPlan& pf, bool with_writes, const std::optional<std::string>& state) {
    std::string out = "pf " + pf.address.str() + ": " +
                      (state ? printable(*state) : std::string(to_string(pf.action)));
    if (pf.reason != Reason::None)
        out += std::string(" (") + to_string(pf.reason) + ")";
    out += "\n  VFs: " + std::to_string(pf.num_vfs) + " now, " + std::to_string(pf.wanted_vfs) +
           " wanted, " + std::to_string(pf.total_vfs) + " at most (sriov_totalvfs)\n";
    out += details_and_writes(pf.details, with_writes ? pf.writes : std::vector<Write>{});
    return out;
}

}  // namespace vfiod::cli
