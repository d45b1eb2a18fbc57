// Device health (DESIGN §13): the pure rule (core/health), the record in run/vfiod/health, and the
// service on the fake kernel, whose AER model follows what Debian's 6.1 kernel was seen doing
// (docs/DESIGN.md, "Observed on Debian's 6.1 kernel"): recovery uevents to every function below
// the port, no uevent for a correctable error, no endpoint count for a fatal one. The test is
// the event loop: it hands each burst of uevents to the service as run_event_loop does.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <mutex>

#include "fake_kernel.hpp"
#include "fake_tree.hpp"
#include "log_capture.hpp"
#include "scenarios.hpp"
#include "service/health_tracker.hpp"
#include "service/service.hpp"

namespace vfiod::test {
namespace {

PciAddress addr(const char* s) { return *PciAddress::parse(s); }

// ---- the pure rule ----

TEST(AerTotal, ReadsTheTotalLineAndRefusesAnythingElse) {
    EXPECT_EQ(aer_total("RxErr 3\nBadTLP 0\nTOTAL_ERR_COR 3\n", "COR"), 3u);
    EXPECT_EQ(aer_total("TOTAL_ERR_FATAL 18446744073709551615", "FATAL"), 18446744073709551615u);
    EXPECT_EQ(aer_total("RxErr 3\n", "COR"), std::nullopt);
    EXPECT_EQ(aer_total("TOTAL_ERR_COR -1\n", "COR"), std::nullopt);
    EXPECT_EQ(aer_total("TOTAL_ERR_COR 3x\n", "COR"), std::nullopt);
    EXPECT_EQ(aer_total("TOTAL_ERR_COR \n", "COR"), std::nullopt);
    EXPECT_EQ(aer_total("TOTAL_ERR_COR 18446744073709551616\n", "COR"), std::nullopt);
    EXPECT_EQ(aer_total("TOTAL_ERR_NONFATAL 2\n", "COR"), std::nullopt);
}

HealthReading totals(uint64_t cor, uint64_t nonfatal = 0, uint64_t fatal = 0) {
    HealthReading r;
    r.totals = AerTotals{cor, nonfatal, fatal};
    return r;
}

TEST(NextHealth, FirstReadIsTheBaselineAndCountsAboveItDegrade) {
    FunctionHealth h = next_health(std::nullopt, {}, totals(5, 1), HealthCheck::Start);
    EXPECT_EQ(h.health, Health::Ok);
    EXPECT_EQ(h.reason, "");
    h = next_health(h, {}, totals(8, 1), HealthCheck::Event);
    EXPECT_EQ(h.health, Health::Degraded);
    EXPECT_EQ(h.reason, "aer-correctable: 3 since start");
    // The count moves on under the same finding; an uncorrectable count outranks it.
    h = next_health(h, {}, totals(9, 1), HealthCheck::Event);
    EXPECT_EQ(h.reason, "aer-correctable: 4 since start");
    h = next_health(h, {}, totals(9, 2), HealthCheck::Event);
    EXPECT_EQ(h.reason, "aer-correctable: 4 since start");  // same level: the first finding
    // A Reload with no new error clears it, and measures from here.
    h = next_health(h, {}, totals(9, 2), HealthCheck::Reload);
    EXPECT_EQ(h.health, Health::Ok);
    h = next_health(h, {}, totals(10, 2), HealthCheck::Event);
    EXPECT_EQ(h.reason, "aer-correctable: 1 since start");
}

TEST(NextHealth, FailedStandsUntilClearedAndGoneIsNeverCleared) {
    Recovery failed{.failed = true, .recovered = false};
    FunctionHealth h = next_health(std::nullopt, failed, totals(0), HealthCheck::Event);
    EXPECT_EQ(h.health, Health::Failed);
    EXPECT_EQ(h.reason, "aer-fatal: recovery failed");
    EXPECT_EQ(next_health(h, {}, totals(0), HealthCheck::Event).health, Health::Failed);
    EXPECT_EQ(next_health(h, {}, totals(0), HealthCheck::Start).health, Health::Failed);
    // A Reload that finds a new error keeps it; one that finds none clears it.
    EXPECT_EQ(next_health(h, {}, totals(1), HealthCheck::Reload).health, Health::Failed);
    EXPECT_EQ(next_health(h, {}, totals(0), HealthCheck::Reload).health, Health::Ok);
    HealthReading gone = totals(0);
    gone.gone = true;
    h = next_health(h, {}, gone, HealthCheck::Event);
    EXPECT_EQ(h.reason, "aer-fatal: recovery failed");  // failed already: the first why stays
    for (HealthCheck why : {HealthCheck::Reload, HealthCheck::Clear})
        EXPECT_EQ(next_health(h, {}, gone, why).health, Health::Failed);
    EXPECT_EQ(next_health(h, {}, totals(0), HealthCheck::Clear).health, Health::Ok);
}

TEST(NextHealth, RecoveredIsDegradedAndNoAerIsUnknown) {
    Recovery recovered{.failed = false, .recovered = true};
    FunctionHealth h = next_health(std::nullopt, recovered, totals(0, 1), HealthCheck::Event);
    EXPECT_EQ(h.health, Health::Degraded);
    EXPECT_EQ(h.reason, "aer-recovered: an uncorrectable error, recovered by the kernel");
    HealthReading none;
    h = next_health(std::nullopt, {}, none, HealthCheck::Event);
    EXPECT_EQ(h.health, Health::Unknown);
    EXPECT_EQ(health_code(h.reason), "no-aer");
    h = next_health(h, recovered, none, HealthCheck::Event);  // a function without AER too
    EXPECT_EQ(h.health, Health::Degraded);
    none.unreadable = "aer_dev_fatal: a FIFO, not a regular file";
    h = next_health(std::nullopt, {}, none, HealthCheck::Event);
    EXPECT_EQ(h.reason, "unreadable: aer_dev_fatal: a FIFO, not a regular file");
}

TEST(NextHealth, CountsBelowTheBaselineStartAnotherLife) {
    FunctionHealth h = next_health(std::nullopt, {}, totals(50), HealthCheck::Start);
    h = next_health(h, {}, totals(2), HealthCheck::Event);  // enumerated again: counts from 0
    EXPECT_EQ(h.health, Health::Ok);
    EXPECT_EQ(h.baseline, (AerTotals{2, 0, 0}));
    EXPECT_EQ(next_health(h, {}, totals(3), HealthCheck::Event).reason,
              "aer-correctable: 1 since start");
}

TEST(HealthRecord, LinesRoundTripAndForeignLinesAreRefused) {
    FunctionHealth h{Health::Failed, "aer-fatal: recovery failed", AerTotals{1, 2, 3}, std::nullopt};
    std::string line = health_record_line(addr("0000:01:00.0"), h);
    EXPECT_EQ(line, "0000:01:00.0 failed 1 2 3 - - - aer-fatal: recovery failed");
    auto back = parse_health_record_line(line);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->first, addr("0000:01:00.0"));
    EXPECT_EQ(back->second, h);
    for (const char* bad : {
             "0000:01:00.0 failed 1 2 3 - - -",                // no reason field
             "0000:01:00.0 broken 1 2 3 - - - x: y",           // no such state
             "0000:01:00.0 ok 1 2 3 - - - x: y",               // ok has no reason
             "0000:01:00.0 failed 1 2 - - - - x: y",           // half a totals triple
             "0000:01:00.0 failed 1 2 3x - - - x: y",          // not a count
             "0000:01:00.0 failed 1 2 3 - - - x\x1b[2J",       // a control character
             "0000:01:00.0 failed 1 2 3 - - - x\xff",          // not ASCII
             "zzzz failed 1 2 3 - - - x: y",                   // not an address
         })
        EXPECT_FALSE(parse_health_record_line(bad)) << bad;
}

// ---- the service on the fake kernel ----

const char kGpu[] = "0000:01:00.0";
const char kAudio[] = "0000:01:00.1";
constexpr unsigned kGroup = 13;

class HealthService : public ::testing::Test {
protected:
    HealthService() {
        kernel.add_aer(kGpu);
        // What the udev monitor hands the event loop: the functions, and the recovery events.
        kernel.on_device_uevent([this](const Uevent& ev) {
            if (ev.subsystem != "pci")
                return;
            std::lock_guard lock(mu);
            auto a = PciAddress::parse(ev.get("PCI_SLOT_NAME"));
            if (!a)
                return;
            touched.insert(*a);
            Recovery r = recovery_of(ev.action == "change" ? ev.get("ERROR_EVENT").c_str()
                                                           : nullptr);
            if (r.failed || r.recovered)
                recovery[*a].merge(r);
            ++heard;
        });
    }
    // One coalesced burst, as run_event_loop hands it over.
    void pump(Service& s) {
        std::set<PciAddress> t;
        std::map<PciAddress, Recovery> r;
        {
            std::lock_guard lock(mu);
            t.swap(touched);
            r.swap(recovery);
        }
        if (!r.empty())
            s.handle_recovery(r);
        if (!t.empty())
            s.handle_events(t);
        s.publish();
    }
    // Started, and the coldplug's own uevents heard: what follows is the test's.
    void start(Service& s) {
        ASSERT_TRUE(s.start());
        pump(s);
        std::lock_guard lock(mu);
        heard = 0;
    }
    const DeviceInfo& dev(const Service& s, const char* bdf) {
        return s.inventory().devices.at(addr(bdf));
    }
    Health group_health(const Service& s) { return s.inventory().groups.at(kGroup).health; }

    FakeTree tree;
    bool built = (build_gpu_host(tree), true);
    FakeKernel kernel{tree};
    std::mutex mu;
    std::set<PciAddress> touched;
    std::map<PciAddress, Recovery> recovery;
    size_t heard = 0;
};

TEST_F(HealthService, PublishesEachFunctionsHealthAndTheGroupsWorst) {
    Service s(kernel, {});
    start(s);
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Ok);
    EXPECT_EQ(dev(s, kGpu).health_reason, "");
    EXPECT_EQ(dev(s, kAudio).health, Health::Unknown);  // QEMU's audio function has no AER
    EXPECT_EQ(dev(s, kAudio).health_reason, "no-aer: the function has no AER capability");
    EXPECT_EQ(group_health(s), Health::Unknown);
}

TEST_F(HealthService, NonFatalRecoveredDegradesBothFunctionsFromTheUeventsAlone) {
    Service s(kernel, {});
    start(s);
    kernel.inject_aer(kGpu, FakeKernel::AerKind::NonFatal);
    EXPECT_EQ(heard, 4u);  // BEGIN and SUCCESSFUL to each function below the port
    pump(s);
    EXPECT_EQ(dev(s, kGpu).health, Health::Degraded);
    EXPECT_EQ(dev(s, kGpu).health_reason,
              "aer-recovered: an uncorrectable error, recovered by the kernel");
    EXPECT_EQ(dev(s, kAudio).health, Health::Degraded);  // the port's other function
    EXPECT_EQ(group_health(s), Health::Degraded);
    EXPECT_EQ(s.inventory().groups.at(kGroup).state, GroupState::Bound);
}

TEST_F(HealthService, FatalUnrecoveredFailsTheGroupAndARestartKeepsIt) {
    {
        Service s(kernel, {});
        start(s);
        kernel.inject_aer(kGpu, FakeKernel::AerKind::Fatal, false);
        pump(s);
        EXPECT_EQ(dev(s, kGpu).health, Health::Failed);
        EXPECT_EQ(dev(s, kGpu).health_reason, "aer-fatal: recovery failed");
        EXPECT_EQ(dev(s, kAudio).health, Health::Failed);
        EXPECT_EQ(group_health(s), Health::Failed);
    }
    struct stat st;
    ASSERT_EQ(::stat((tree.root() + "/run/vfiod/health").c_str(), &st), 0);
    Service again(kernel, {});
    ASSERT_TRUE(again.start());
    again.publish();
    EXPECT_EQ(dev(again, kGpu).health, Health::Failed);
    EXPECT_EQ(group_health(again), Health::Failed);
    // The operator's Bind, the device reading fine: cleared.
    EXPECT_TRUE(again.bind(kGpu).ok());
    again.publish();
    EXPECT_EQ(dev(again, kGpu).health, Health::Ok);
    EXPECT_EQ(dev(again, kAudio).health, Health::Unknown);
}

TEST_F(HealthService, CorrectableErrorsShowAtTheNextReloadAndAQuietReloadClears) {
    Service s(kernel, {});
    start(s);
    kernel.inject_aer(kGpu, FakeKernel::AerKind::Correctable);
    kernel.inject_aer(kGpu, FakeKernel::AerKind::Correctable);
    EXPECT_EQ(heard, 0u);  // no uevent for a correctable error
    pump(s);
    EXPECT_EQ(dev(s, kGpu).health, Health::Ok);
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Degraded);
    EXPECT_EQ(dev(s, kGpu).health_reason, "aer-correctable: 2 since start");
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Ok);
}

TEST_F(HealthService, AFunctionReadingAllOnesIsFailedUntilItReadsAgain) {
    Service s(kernel, {});
    start(s);
    kernel.lose_device(kGpu);
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Failed);
    EXPECT_EQ(dev(s, kGpu).health_reason, "gone: config space reads all ones");
    // The cached vendor file still says NVIDIA: the record is the planner's, unchanged.
    EXPECT_EQ(dev(s, kGpu).vendor, 0x10de);
    ASSERT_TRUE(s.reload().ok());
    EXPECT_TRUE(s.bind(kGpu).ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Failed);
    tree.remove(tree.devpath(kGpu) + "/config");
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Ok);
}

// An SR-IOV VF's vendor and device IDs read all ones in its config space, by the PCIe spec (the
// kernel takes them from the PF's SR-IOV capability); its class dword is real. Seen on 6.1 with
// QEMU's emulated NVMe VFs: not a device that is gone.
TEST_F(HealthService, AVfsAllOnesIdsAreNotAGoneDevice) {
    tree.write_file(tree.devpath(kGpu) + "/config",
                    std::string(4, '\xff') + std::string("\x06\x04\x10\x00\xa1\x00\x02\x03", 8) +
                        std::string(52, '\0'));
    Service s(kernel, {});
    start(s);
    ASSERT_TRUE(s.reload().ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Ok);
}

TEST_F(HealthService, ARecoveryAHandlerlessDriverBreaksFailsEveryFunctionBelowThePort) {
    // The host drivers, as in the 6.1 observation: snd_hda_intel has no error handlers.
    tree.write_file("etc/vfiod/vfiod.toml",
                    "[daemon]\nmode = \"observe\"\ncompanions = \"bind\"\n"
                    "[[device]]\nselector = \"10de:2331\"\n");
    kernel.lacks_error_handlers("snd_hda_intel");
    Service s(kernel, {});
    start(s);
    kernel.inject_aer(kGpu, FakeKernel::AerKind::NonFatal);
    pump(s);
    EXPECT_EQ(dev(s, kGpu).driver, "nvidia");
    EXPECT_EQ(dev(s, kGpu).health, Health::Failed);
    EXPECT_EQ(dev(s, kAudio).health, Health::Failed);
    // Observe mode writes nothing, the health record included.
    struct stat st;
    EXPECT_NE(::stat((tree.root() + "/run/vfiod/health").c_str(), &st), 0);
}

TEST_F(HealthService, CounterFilesThatAreNotTheKernelsMakeTheFunctionUnknown) {
    const std::string dir = tree.devpath(kGpu);
    struct Case {
        const char* what;
        std::function<void()> make;
        const char* reason;
    };
    const Case cases[] = {
        {"a FIFO", [&] {
             tree.remove(dir + "/aer_dev_fatal");
             ASSERT_EQ(::mkfifo((tree.root() + "/" + dir + "/aer_dev_fatal").c_str(), 0644), 0);
         }, "unreadable: aer_dev_fatal: a FIFO, not a regular file"},
        {"garbage", [&] { tree.write_file(dir + "/aer_dev_nonfatal", "\x01\xff garbage"); },
         "unreadable: aer_dev_nonfatal has no TOTAL_ERR_NONFATAL count"},
        {"huge", [&] {
             tree.write_file(dir + "/aer_dev_correctable",
                             std::string(1 << 20, 'x') + "\nTOTAL_ERR_COR 1\n");
         }, "unreadable: aer_dev_correctable has no TOTAL_ERR_COR count"},
        {"one missing", [&] { tree.remove(dir + "/aer_dev_fatal"); },
         "unreadable: some aer_dev_* files are missing"},
    };
    for (const Case& c : cases) {
        kernel.add_aer(kGpu);
        c.make();
        Service s(kernel, {.config_file = std::nullopt, .force_observe = true});
        ASSERT_TRUE(s.start());
        s.publish();
        EXPECT_EQ(dev(s, kGpu).health, Health::Unknown) << c.what;
        EXPECT_EQ(dev(s, kGpu).health_reason, c.reason) << c.what;
        tree.remove(dir + "/aer_dev_fatal");
    }
}

TEST_F(HealthService, AnErrorStormCostsOneLinePerStateChange) {
    Service s(kernel, {});
    start(s);
    LogCapture log;
    std::chrono::steady_clock::duration in_service{};
    for (int burst = 0; burst < 100; ++burst) {
        for (int i = 0; i < 25; ++i)  // 100 bursts × 25 errors × 4 uevents = 10,000 uevents
            kernel.inject_aer(kGpu, FakeKernel::AerKind::NonFatal);
        const auto t0 = std::chrono::steady_clock::now();
        pump(s);
        in_service += std::chrono::steady_clock::now() - t0;
    }
    EXPECT_EQ(heard, 10000u);
    // One check per burst and group, whatever the burst holds: about 1 ms a burst here; this
    // catches a check per uevent (40 times the work), not a slow machine.
    EXPECT_LT(in_service, std::chrono::seconds(20));
    size_t health_lines = 0;
    for (const auto& l : log.lines())
        health_lines += l.find(": health ") != std::string::npos;
    EXPECT_EQ(health_lines, 2u);  // each function: degraded, once
    EXPECT_EQ(dev(s, kGpu).health, Health::Degraded);
}

TEST_F(HealthService, AReleasedFunctionNoDriverTakesBackIsQuarantined) {
    Service s(kernel, {});
    start(s);
    kernel.fail_probe(kGpu, "nvidia");  // the hardware no longer answers its driver's probe
    EXPECT_FALSE(s.release(kGpu).ok());  // verified, rolled back onto vfio-pci
    s.publish();
    EXPECT_EQ(s.inventory().groups.at(kGroup).state, GroupState::Failed);
    EXPECT_EQ(dev(s, kGpu).health, Health::Failed);
    EXPECT_EQ(dev(s, kGpu).health_reason,
              "quarantine: nvidia did not take it back after the release (on vfio-pci)");
    EXPECT_EQ(dev(s, kAudio).health, Health::Unknown);
    // A Reload does not bind it again behind the operator's back, nor clear it while the
    // release stands refused; an operator's Bind once it reads fine does.
    kernel.heal_probe(kGpu, "nvidia");
    EXPECT_TRUE(s.bind(kGpu).ok());
    s.publish();
    EXPECT_EQ(dev(s, kGpu).health, Health::Ok);
}

// An mdev takes its PCI parent's health: the T4 of "k8s-mdev-host" (never bound, not in a
// published group) fails its recovery, and its vGPUs' MediatedDevice objects say so.
TEST(HealthMdev, AnMdevFollowsItsPciParent) {
    FakeTree tree;
    ASSERT_TRUE(build_scenario("k8s-mdev-host", tree));
    tree.write_file("etc/vfiod/vfiod.toml",
                    "[daemon]\nmode = \"enforce\"\n[[mdev]]\nparent = \"0000:06:00.0\"\n"
                    "type = \"nvidia-222\"\ncount = 2\nresource_name = \"nvidia.com/T4\"\n");
    FakeKernel kernel(tree);
    for (const auto& p : scenario_mdev_parents("k8s-mdev-host"))
        kernel.register_mdev_parent(p, false);
    kernel.add_aer(kMdevPciParent);
    std::set<PciAddress> touched;
    std::map<PciAddress, Recovery> recovery;
    kernel.on_device_uevent([&](const Uevent& ev) {
        auto a = PciAddress::parse(ev.get("PCI_SLOT_NAME"));
        if (ev.subsystem != "pci" || !a)
            return;
        touched.insert(*a);
        Recovery r = recovery_of(ev.action == "change" ? ev.get("ERROR_EVENT").c_str() : nullptr);
        if (r.failed || r.recovered)
            recovery[*a].merge(r);
    });
    Service s(kernel, {});
    ASSERT_TRUE(s.start());
    s.publish();
    auto mdev_health = [&] {
        std::set<std::pair<Health, std::string>> out;
        for (const auto& [uuid, m] : s.inventory().mdevs)
            if (m.parent == kMdevPciParent)
                out.insert({m.health, m.health_reason});
        return out;
    };
    ASSERT_EQ(s.inventory().mdevs.size(), 2u);
    EXPECT_EQ(mdev_health(), (std::set<std::pair<Health, std::string>>{{Health::Ok, ""}}));
    touched.clear();
    kernel.inject_aer(kMdevPciParent, FakeKernel::AerKind::Fatal, false);
    s.handle_recovery(recovery);
    s.handle_events(touched);
    s.publish();
    EXPECT_EQ(mdev_health(), (std::set<std::pair<Health, std::string>>{
                                 {Health::Failed, "aer-fatal: recovery failed"}}));
}

TEST(HealthTracker, ACountAloneIsPublishedAtMostOnceASecond) {
    FakeTree tree;
    KernelHostFs fs(tree.root());
    HealthTracker t(fs);
    const auto t0 = HealthTracker::Clock::now();
    FunctionHealth h{Health::Degraded, "aer-correctable: 1 since start", AerTotals{}, AerTotals{}};
    const PciAddress a = addr("0000:01:00.0");
    EXPECT_TRUE(t.update(a, h, t0));
    h.reason = "aer-correctable: 2 since start";
    EXPECT_FALSE(t.update(a, h, t0 + std::chrono::milliseconds(100)));
    EXPECT_EQ(t.reason(a), "aer-correctable: 1 since start");
    EXPECT_EQ(t.due(), t0 + std::chrono::seconds(1));
    EXPECT_TRUE(t.flush(t0 + std::chrono::milliseconds(999)).empty());
    EXPECT_EQ(t.flush(t0 + std::chrono::seconds(1)), std::set<PciAddress>{a});
    EXPECT_EQ(t.reason(a), "aer-correctable: 2 since start");
    EXPECT_FALSE(t.due());
    // A state change is never held.
    h = {Health::Failed, "aer-fatal: recovery failed", AerTotals{}, AerTotals{}};
    EXPECT_TRUE(t.update(a, h, t0 + std::chrono::milliseconds(1100)));
    EXPECT_EQ(t.health(a), Health::Failed);
}

TEST(HealthTracker, ARecordThatIsNotVfiodsIsIgnored) {
    FakeTree tree;
    KernelHostFs fs(tree.root());
    const PciAddress a = addr("0000:01:00.0");
    for (const std::string& text : {
             std::string("not a header\n0000:01:00.0 failed 0 0 0 0 0 0 aer-fatal: x\n"),
             std::string("vfiod-health 1\n0000:01:00.0 failed 0 0 0 0 0 0\n"),
             std::string("vfiod-health 1\n") + std::string(2 << 20, 'x'),
         }) {
        tree.write_file("run/vfiod/health", text);
        HealthTracker t(fs);
        t.load();
        EXPECT_EQ(t.find(a), nullptr);
    }
    tree.remove("run/vfiod/health");
    ASSERT_EQ(::mkfifo((tree.root() + "/run/vfiod/health").c_str(), 0644), 0);
    HealthTracker t(fs);
    t.load();  // returns: a FIFO is never opened for reading
    EXPECT_EQ(t.find(a), nullptr);
}

}  // namespace
}  // namespace vfiod::test
