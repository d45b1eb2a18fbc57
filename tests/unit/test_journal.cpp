// The journal: its text form round-trips, stores are atomic replacements, and bad or partial
// files are reported instead of trusted.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>

#include "exec/journal.hpp"
#include "fake_tree.hpp"

using namespace vfiod;
using vfiod::test::FakeTree;

namespace {

PciAddress A(const char* s) { return *PciAddress::parse(s); }

JournalEntry sample() {
    JournalEntry e;
    e.group = 13;
    e.op = JournalEntry::Op::Bind;
    e.phase = JournalEntry::Phase::Started;
    e.functions.push_back({A("0000:01:00.0"), "nvidia", "nvidia", "", "vfio-pci"});
    e.functions.push_back({A("0000:01:00.1"), "snd_hda_intel", "snd_hda_intel", "", "vfio-pci"});
    return e;
}

}  // namespace

TEST(JournalText, RoundTripsEveryField) {
    JournalEntry e = sample();
    e.op = JournalEntry::Op::Release;
    e.phase = JournalEntry::Phase::Stuck;
    e.released = true;
    // An admin's override can hold anything; it must come back byte for byte.
    e.functions[1].before_override = "weird name=x%y\t";
    std::string err;
    auto back = parse_journal(serialize(e), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(back->group, 13u);
    EXPECT_EQ(back->op, JournalEntry::Op::Release);
    EXPECT_EQ(back->phase, JournalEntry::Phase::Stuck);
    EXPECT_TRUE(back->released);
    ASSERT_EQ(back->functions.size(), 2u);
    EXPECT_EQ(back->functions[0].address, A("0000:01:00.0"));
    EXPECT_EQ(back->functions[0].original, "nvidia");
    EXPECT_EQ(back->functions[0].target, "vfio-pci");
    EXPECT_EQ(back->functions[1].before_override, "weird name=x%y\t");
    EXPECT_EQ(back->originals().at(A("0000:01:00.1")), "snd_hda_intel");
}

TEST(JournalText, RejectsWhatItDidNotWrite) {
    std::string err;
    EXPECT_FALSE(parse_journal("", &err));
    EXPECT_FALSE(parse_journal("something else\n", &err));
    EXPECT_FALSE(parse_journal("vfiod-journal 1\ngroup 3\nop bind\n", &err));  // no phase
    EXPECT_NE(err.find("incomplete"), std::string::npos) << err;
    EXPECT_FALSE(parse_journal("vfiod-journal 1\ngroup 3\nop dance\nphase done\n", &err));
    EXPECT_NE(err.find("line 3"), std::string::npos) << err;
    EXPECT_FALSE(parse_journal(
        "vfiod-journal 1\ngroup 3\nop bind\nphase done\nfunction 0000:01:00.0 original=%zz\n", &err));
    EXPECT_FALSE(parse_journal(
        "vfiod-journal 1\ngroup 3\nop bind\nphase done\nfunction ../../x original=a\n", &err));
}

// Crash safety of store() (temp, fsync, rename) is exercised by the executor's crash-snapshot
// test; here: the round trip, and no temp file left behind.
TEST(JournalStore, StoresAndLoadsBackLeavingNoTempFile) {
    FakeTree tree;
    HostFs fs(tree.root());
    Journal j(fs);
    EXPECT_FALSE(j.load(13));
    ASSERT_EQ(j.store(sample()), 0);
    auto e = j.load(13);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->functions.size(), 2u);
    EXPECT_EQ(j.entry_path(13), "run/vfiod/group-13");
    EXPECT_FALSE(std::filesystem::exists(tree.root() + "/run/vfiod/group-13.tmp"));

    JournalEntry done = sample();
    done.phase = JournalEntry::Phase::Done;
    ASSERT_EQ(j.store(done), 0);
    EXPECT_EQ(j.load(13)->phase, JournalEntry::Phase::Done);
    ASSERT_EQ(j.remove(13), 0);
    EXPECT_FALSE(j.load(13));
    EXPECT_EQ(j.remove(13), 0);  // removing nothing is fine
}

TEST(JournalStore, LoadAllSkipsTempFilesAndNamesBrokenEntries) {
    FakeTree tree;
    HostFs fs(tree.root());
    Journal j(fs);
    ASSERT_EQ(j.store(sample()), 0);
    JournalEntry other = sample();
    other.group = 4;
    ASSERT_EQ(j.store(other), 0);
    // A crash between write and rename leaves a temp file: it is not an entry.
    tree.write_file("run/vfiod/group-7.tmp", "vfiod-journal 1\ngroup 7\n");
    tree.write_file("run/vfiod/group-9", "garbage\n");
    tree.write_file("run/vfiod/group-8", serialize(sample()));  // says group 13
    std::vector<std::string> errors;
    auto all = j.load_all(&errors);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].group, 13u);  // lexical order of names: group-13 before group-4
    EXPECT_EQ(all[1].group, 4u);
    ASSERT_EQ(errors.size(), 2u);
    EXPECT_NE(errors[0].find("group-8"), std::string::npos) << errors[0];
    EXPECT_NE(errors[1].find("group-9"), std::string::npos) << errors[1];
}

TEST(JournalStore, ReleasedIsStickyUntilCleared) {
    FakeTree tree;
    HostFs fs(tree.root());
    Journal j(fs);
    EXPECT_FALSE(j.released(13));
    JournalEntry e = sample();
    e.op = JournalEntry::Op::Release;
    e.phase = JournalEntry::Phase::Done;
    e.released = true;
    ASSERT_EQ(j.store(e), 0);
    EXPECT_TRUE(j.released(13));
    // A second journal over the same root (a restarted daemon) sees the mark.
    Journal again(fs);
    EXPECT_TRUE(again.released(13));
    ASSERT_EQ(again.clear_released(13), 0);
    EXPECT_FALSE(j.released(13));
    EXPECT_EQ(j.load(13)->functions.size(), 2u);  // originals survive the clearing
}

TEST(JournalStore, ReportsAnUnwritableDirectory) {
    FakeTree tree;
    tree.write_file("run/vfiod", "a file where the directory should be\n");
    HostFs fs(tree.root());
    Journal j(fs);
    EXPECT_NE(j.store(sample()), 0);
}

// Issue 10, row 4 on the journal: a FIFO at the temp name blocked store()'s open(O_WRONLY)
// forever, on the operation's thread: the group stayed `pending`, every later request on it
// timed out, and SIGTERM waited for that thread. One at an entry's name was read as no entry.
TEST(JournalStore, AFifoInTheDirectoryBlocksNothingAndIsNamed) {
    FakeTree tree;
    tree.write_file("run/vfiod/keep", "");
    const std::string tmp = tree.root() + "/run/vfiod/group-13.tmp";
    ASSERT_EQ(::mkfifo(tmp.c_str(), 0644), 0);
    HostFs fs(tree.root());
    Journal j(fs);
    auto stored = std::async(std::launch::async, [&] { return j.store(sample()); });
    if (stored.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
        int unblock = ::open(tmp.c_str(), O_RDONLY | O_NONBLOCK);  // lets the blocked open go on
        stored.wait();
        ::close(unblock);
        FAIL() << "store() blocked on the FIFO at group-13.tmp";
    }
    EXPECT_EQ(stored.get(), 0);
    EXPECT_EQ(j.load(13)->functions.size(), 2u);
    EXPECT_FALSE(std::filesystem::exists(tmp));

    ASSERT_EQ(::mkfifo((tree.root() + "/run/vfiod/group-4").c_str(), 0644), 0);
    std::string err;
    EXPECT_FALSE(j.load(4, &err));
    EXPECT_EQ(err, "run/vfiod/group-4: a FIFO, not a regular file");
    std::vector<std::string> errors;
    EXPECT_EQ(j.load_all(&errors).size(), 1u);
    EXPECT_EQ(errors, std::vector<std::string>{"run/vfiod/group-4: a FIFO, not a regular file"});
}
