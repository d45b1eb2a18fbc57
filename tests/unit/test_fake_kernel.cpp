// The fake kernel the executor and service tests run on answers writes as the real kernel was
// observed to (tests/vm proves the same on a real one).
#include <gtest/gtest.h>

#include <cerrno>

#include "exec_world.hpp"

using namespace vfiod;
using namespace vfiod::test::world;
using vfiod::test::FakeKernel;

// The fake kernel answers as Linux 6.1 was observed to (tests/vm/scenarios/executor-apply.sh).
TEST(FakeKernel, AnswersAsTheRealKernelWasObservedTo) {
    World w;
    FakeKernel& k = *w.kernel;
    const std::string gpu = std::string("sys/bus/pci/devices/") + kGpu;
    EXPECT_EQ(k.write("sys/bus/pci/drivers/nvidia/bind", kGpu), EBUSY);        // already bound
    EXPECT_EQ(k.write("sys/bus/pci/drivers/igb/bind", kAudio), ENODEV);        // no match
    EXPECT_EQ(k.write("sys/bus/pci/drivers/igb/unbind", kGpu), ENODEV);        // not its driver
    EXPECT_EQ(k.write("sys/bus/pci/drivers_probe", "0000:09:00.0"), ENODEV);  // no such device
    EXPECT_EQ(k.write(gpu + "/driver_override", "nosuchdrv"), 0);
    EXPECT_EQ(k.write(gpu + "/driver/unbind", kGpu), 0);
    EXPECT_EQ(w.driver(kGpu), "");
    EXPECT_EQ(k.write("sys/bus/pci/drivers_probe", kGpu), 0);  // succeeds, binds nothing
    EXPECT_EQ(w.driver(kGpu), "");
    EXPECT_EQ(k.write("sys/bus/pci/drivers/nvidia/bind", kGpu), ENODEV);  // the override decides
    EXPECT_EQ(k.write(gpu + "/driver_override", "\n"), 0);
    EXPECT_EQ(w.override_of(kGpu), "(null)");
    // A 0-byte write never reaches the attribute; a literal "(null)" is an override like any
    // other and lets no driver bind.
    EXPECT_EQ(k.write(gpu + "/driver_override", "(null)"), 0);
    EXPECT_EQ(k.write("sys/bus/pci/drivers_probe", kGpu), 0);
    EXPECT_EQ(w.driver(kGpu), "");
    EXPECT_EQ(k.write(gpu + "/driver_override", "vfio-pci"), 0);
    EXPECT_EQ(k.write(gpu + "/driver_override", ""), 0);
    EXPECT_EQ(w.override_of(kGpu), "vfio-pci");
    EXPECT_EQ(k.write(gpu + "/driver_override", "\n"), 0);
    EXPECT_EQ(k.write("sys/bus/pci/drivers/nvidia/bind", kGpu), 0);
    EXPECT_EQ(w.driver(kGpu), "nvidia");

    // Injected faults hit exactly the write they name and change nothing.
    k.fail_path(gpu + "/driver_override", EINVAL, 2);
    EXPECT_EQ(k.write(gpu + "/driver_override", "vfio-pci"), 0);
    EXPECT_EQ(k.write(gpu + "/driver_override", "igb"), EINVAL);
    EXPECT_EQ(w.override_of(kGpu), "vfio-pci");
    k.remove_function(kGpu);
    EXPECT_EQ(k.write(gpu + "/driver_override", "\n"), ENOENT);
    EXPECT_EQ(k.write("sys/bus/pci/drivers_probe", kGpu), ENODEV);
}
