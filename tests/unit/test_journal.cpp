// The journal: its text form round-trips, stores are atomic replacements, and bad or partial
// files are reported instead of trusted.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <future>

#include "exec/journal.hpp"
#include "io/host_fs.hpp"
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
    KernelHostFs fs(tree.root());
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
    KernelHostFs fs(tree.root());
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
    KernelHostFs fs(tree.root());
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
    EXPECT_FALSE(again.released(13));
    // The mark lives in memory with the entry as its persistence: a third start sees it gone.
    Journal third(fs);
    EXPECT_FALSE(third.released(13));
    EXPECT_EQ(third.load(13)->functions.size(), 2u);  // originals survive the clearing
}

// Issue 25: deciding a group asks for its mark, and thousands of groups asked one file read
// each. Once read, the mark follows this journal's own stores and removals without a read: an
// entry file changed behind its back (which only another process could do) is not seen.
TEST(JournalStore, ReleasedIsAskedWithoutReadingTheEntry) {
    FakeTree tree;
    KernelHostFs fs(tree.root());
    Journal j(fs);
    JournalEntry e = sample();
    e.released = true;
    ASSERT_EQ(j.store(e), 0);
    EXPECT_TRUE(j.released(13));
    tree.write_file("run/vfiod/group-13", "not an entry\n");
    EXPECT_TRUE(j.released(13));
    e.released = false;
    ASSERT_EQ(j.store(e), 0);
    EXPECT_FALSE(j.released(13));
    e.released = true;
    ASSERT_EQ(j.store(e), 0);
    ASSERT_EQ(j.remove(13), 0);
    EXPECT_FALSE(j.released(13));
    // A failed store leaves the mark as the entry on disk has it.
    ASSERT_EQ(j.store(e), 0);
    tree.remove("run/vfiod");
    tree.write_file("run/vfiod", "a file where the directory should be\n");
    e.released = false;
    EXPECT_NE(j.store(e), 0);
    EXPECT_TRUE(j.released(13));
}

TEST(JournalStore, ReportsAnUnwritableDirectory) {
    FakeTree tree;
    tree.write_file("run/vfiod", "a file where the directory should be\n");
    KernelHostFs fs(tree.root());
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
    KernelHostFs fs(tree.root());
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

// Issue 20, finding 3: with DIR/run a symlink out of the tree, store() created vfiod/group-N in
// the directory it led to (plain open/rename on path()), while load() resolved inside the root
// and never saw them. With run -> /run a test-tree run planted entries, sticky `released` marks
// included, for the live daemon to act on. Every journal access now resolves inside the root, and
// a link that leads out of it is refused, naming the path.
namespace {

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

struct OutsideLink {
    FakeTree tree;
    FakeTree outside;  // another directory on the same machine, standing in for the live /run
};

void expect_refused_outside(OutsideLink& o) {
    KernelHostFs fs(o.tree.root());
    Journal j(fs);
    JournalEntry e = sample();
    e.phase = JournalEntry::Phase::Done;
    e.released = true;
    EXPECT_EQ(j.store(e), EXDEV);
    for (const auto& p : std::filesystem::recursive_directory_iterator(o.outside.root()))
        EXPECT_EQ(p.path().filename().string().rfind("group-", 0), std::string::npos) << p.path();
    EXPECT_FALSE(std::filesystem::exists(o.outside.root() + "/run/vfiod"));
    EXPECT_EQ(j.remove(13), EXDEV);
    std::vector<std::string> errors;
    EXPECT_TRUE(j.load_all(&errors).empty());
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0], "run/vfiod: a symlink on the way leads out of the root " + o.tree.root() +
                             "; the journal is not used there");
    EXPECT_EQ(j.describe_error(13, EXDEV),
              "journal run/vfiod/group-13: a symlink on the way leads out of the root " +
                  o.tree.root() + "; the journal is not used there");
}

}  // namespace

TEST(JournalRoot, ARunLinkToAnAbsolutePathIsRefusedAndNothingIsWrittenThere) {
    OutsideLink o;
    o.outside.write_file("run/keep", "");
    o.tree.symlink("run", o.outside.root() + "/run");
    expect_refused_outside(o);
}

TEST(JournalRoot, AVfiodLinkPastTheRootIsRefused) {
    OutsideLink o;
    o.outside.write_file("vfiod/keep", "");
    // Enough ".." to climb out of any temporary directory, then down into the other one.
    o.tree.symlink("run/vfiod", "../../../../../../../../../../.." + o.outside.root() + "/vfiod");
    expect_refused_outside(o);
}

namespace {

// run -> var/run, inside the tree: the entry is stored, read, listed and removed there.
void expect_inside_link_followed() {
    FakeTree tree;
    tree.write_file("var/run/keep", "");
    tree.symlink("run", "var/run");
    KernelHostFs fs(tree.root());
    Journal j(fs);
    ASSERT_EQ(j.store(sample()), 0);
    EXPECT_TRUE(std::filesystem::exists(tree.root() + "/var/run/vfiod/group-13"));
    EXPECT_EQ(j.load(13)->functions.size(), 2u);
    EXPECT_EQ(j.load_all().size(), 1u);
    EXPECT_EQ(j.remove(13), 0);
    EXPECT_FALSE(j.load(13));
}

}  // namespace

// A kernel without openat2 (before 5.6, or a seccomp filter hiding it) refuses the same links,
// and follows the same link inside the tree.
TEST(JournalRoot, WithoutOpenat2TheSameLinksAreRefused) {
    sysfs_testing::set_openat2([](int, const char*, void*, size_t) -> long {
        errno = ENOSYS;
        return -1;
    });
    {
        OutsideLink o;
        o.outside.write_file("run/keep", "");
        o.tree.symlink("run", o.outside.root() + "/run");
        expect_refused_outside(o);
    }
    expect_inside_link_followed();
    sysfs_testing::set_openat2(nullptr);
}

// A link that stays inside the tree is followed, for writes as for reads.
TEST(JournalRoot, ARunLinkInsideTheTreeIsFollowed) { expect_inside_link_followed(); }

// An entry that is itself a symlink (to /etc/shadow, say) is not vfiod's: never read through,
// never replaced through either.
TEST(JournalRoot, AnEntryThatIsASymlinkIsNotFollowed) {
    FakeTree tree;
    FakeTree outside;
    outside.write_file("shadow", serialize(sample()));
    tree.symlink("run/vfiod/group-13", outside.root() + "/shadow");
    KernelHostFs fs(tree.root());
    Journal j(fs);
    std::string err;
    EXPECT_FALSE(j.load(13, &err));
    EXPECT_EQ(err, "run/vfiod/group-13: a symbolic link, not a regular file");
    JournalEntry e = sample();
    e.released = true;
    ASSERT_EQ(j.store(e), 0);  // replaces the link itself, as rename(2) does
    EXPECT_EQ(slurp(tree.root() + "/run/vfiod/group-13"), serialize(e));
    EXPECT_EQ(slurp(outside.root() + "/shadow"), serialize(sample()));
}

// A huge entry (100 MB, sparse) is refused after reading a bounded prefix, not parsed in part.
TEST(JournalRoot, AHugeEntryIsRefusedWithoutReadingItAll) {
    FakeTree tree;
    tree.write_file("run/vfiod/group-13", serialize(sample()));
    ASSERT_EQ(::truncate((tree.root() + "/run/vfiod/group-13").c_str(), 100L << 20), 0);
    KernelHostFs fs(tree.root());
    Journal j(fs);
    std::string err;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(j.load(13, &err));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    EXPECT_EQ(err, "run/vfiod/group-13: larger than 1048576 bytes: not an entry vfiod wrote");
}

// run/vfiod a FIFO (or a file): the journal directory is opened O_DIRECTORY, which the kernel
// refuses before any FIFO open could wait; nothing blocks, nothing is created.
TEST(JournalRoot, AFifoOrFileAtTheDirectoryBlocksNothing) {
    FakeTree tree;
    tree.write_file("run/keep", "");
    ASSERT_EQ(::mkfifo((tree.root() + "/run/vfiod").c_str(), 0644), 0);
    KernelHostFs fs(tree.root());
    Journal j(fs);
    auto stored = std::async(std::launch::async, [&] { return j.store(sample()); });
    if (stored.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
        int unblock = ::open((tree.root() + "/run/vfiod").c_str(), O_WRONLY | O_NONBLOCK);
        stored.wait();
        ::close(unblock);
        FAIL() << "store() blocked on a FIFO at run/vfiod";
    }
    EXPECT_EQ(stored.get(), ENOTDIR);
    EXPECT_FALSE(j.load(13));
    std::vector<std::string> errors;
    EXPECT_TRUE(j.load_all(&errors).empty());
    EXPECT_TRUE(errors.empty());
    EXPECT_EQ(j.remove(13), 0);
}

// A temp file planted as a symlink to a file elsewhere: store() removes the link, writes its own
// file, and the file the link named is untouched.
TEST(JournalRoot, ATempFileThatIsASymlinkIsReplacedNotFollowed) {
    FakeTree tree;
    FakeTree outside;
    outside.write_file("victim", "keep me\n");
    tree.symlink("run/vfiod/group-13.tmp", outside.root() + "/victim");
    KernelHostFs fs(tree.root());
    Journal j(fs);
    ASSERT_EQ(j.store(sample()), 0);
    EXPECT_EQ(slurp(outside.root() + "/victim"), "keep me\n");
    EXPECT_EQ(j.load(13)->functions.size(), 2u);
    EXPECT_FALSE(std::filesystem::exists(tree.root() + "/run/vfiod/group-13.tmp"));
}

// Entry names are exactly "group-<number>" as store() writes them: a number past 32 bits (which
// would wrap to 13), a sign or a leading zero names no group, and is not read.
TEST(JournalRoot, EntryNamesThatAreNotGroupNumbersAreIgnored) {
    FakeTree tree;
    for (const char* name : {"group-4294967309", "group-+13", "group-013", "group- 13",
                             "group-99999999999999999999999"})
        tree.write_file(std::string("run/vfiod/") + name, serialize(sample()));
    KernelHostFs fs(tree.root());
    Journal j(fs);
    std::vector<std::string> errors;
    EXPECT_TRUE(j.load_all(&errors).empty());
    EXPECT_TRUE(errors.empty()) << errors.front();
    EXPECT_FALSE(j.load(13));
}

// The bound on functions holds in the parser itself, whatever reads the text.
TEST(JournalText, RefusesMoreFunctionsThanAGroupCanHold) {
    JournalEntry e = sample();
    e.functions.clear();
    for (unsigned i = 0; i < kMaxEntryFunctions; ++i)
        e.functions.push_back({*PciAddress::parse("0000:00:00.0"), "", "", "", "vfio-pci"});
    std::string err;
    EXPECT_TRUE(parse_journal(serialize(e), &err)) << err;
    e.functions.push_back(e.functions.back());
    EXPECT_FALSE(parse_journal(serialize(e), &err));
    EXPECT_EQ(err, "line 262: names more than 256 functions, more than an IOMMU group holds: not "
                   "an entry vfiod wrote");
}

// Mdev entries (DESIGN §12): strict, one path component for parent and type, the UUID
// canonical, and loaded only under the name of the UUID they hold.
TEST(MdevJournal, RoundTripsAndRejectsWhatItDidNotWrite) {
    const std::string uuid = "6d966230-f3a1-5551-97f3-4aec0da0213a";
    MdevJournalEntry e{uuid, "mbochs", "mbochs-small", false, MdevJournalEntry::Phase::Stuck};
    std::string err;
    auto back = parse_mdev_journal(serialize(e), &err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(serialize(*back), serialize(e));
    const std::string head = "vfiod-mdev-journal 1\nuuid " + uuid + "\n";
    const std::string tail = "action create\nphase started\n";
    EXPECT_FALSE(parse_mdev_journal(head + "parent ..\ntype t\n" + tail, &err));
    EXPECT_EQ(err, "line 3: bad parent '..'");
    EXPECT_FALSE(parse_mdev_journal(head + "parent p\ntype t\ntype u\n" + tail, &err));
    EXPECT_EQ(err, "line 5: 'type' given twice");
    EXPECT_FALSE(parse_mdev_journal(head + "parent p\n" + tail, &err));
    EXPECT_FALSE(parse_mdev_journal("vfiod-mdev-journal 1\nuuid 6D966230-F3A1-5551-97F3-"
                                    "4AEC0DA0213A\n",
                                    &err));
    EXPECT_EQ(err, "line 2: bad UUID '6D966230-F3A1-5551-97F3-4AEC0DA0213A'");
}

// What a crash mid-write or a careless hand leaves: an entry cut short (within a line or before
// one), a UUID cut short, and a line far longer than any entry vfiod writes. Each is refused
// with its reason; the long one is named in bounded words and, as a file, not read whole.
TEST(MdevJournal, RefusesTruncatedEntriesBadUuidsAndHugeLines) {
    const std::string uuid = "6d966230-f3a1-5551-97f3-4aec0da0213a";
    const std::string whole = serialize(MdevJournalEntry{uuid, "mbochs", "mbochs-small", true, {}});
    std::string err;
    const size_t action = whole.find("action");
    EXPECT_FALSE(parse_mdev_journal(whole.substr(0, action + 10) + "\n", &err));
    EXPECT_EQ(err, "line 5: unknown action 'cre'");
    EXPECT_FALSE(parse_mdev_journal(whole.substr(0, whole.find("parent") + 6) + "\n", &err));
    EXPECT_EQ(err, "line 3: bad parent ''");
    EXPECT_FALSE(parse_mdev_journal(whole.substr(0, whole.find("phase")), &err));
    EXPECT_EQ(err, "incomplete entry (uuid, parent, type, action and phase are required)");
    EXPECT_FALSE(parse_mdev_journal("vfiod-mdev-journal 1\nuuid " + uuid.substr(0, 20) + "\n",
                                    &err));
    EXPECT_EQ(err, "line 2: bad UUID '" + uuid.substr(0, 20) + "'");

    const std::string huge(1 << 20, 'x');
    const std::string head = "vfiod-mdev-journal 1\nuuid " + uuid + "\nparent mbochs\ntype ";
    EXPECT_FALSE(parse_mdev_journal(head + huge + "\naction create\nphase started\n", &err));
    EXPECT_EQ(err.rfind("line 4: bad type 'xxx", 0), 0u) << err.substr(0, 80);
    EXPECT_LT(err.size(), 400u);

    FakeTree tree;
    KernelHostFs fs(tree.root());
    tree.write_file("run/vfiod/mdev-" + uuid, head + huge + "\naction create\nphase started\n");
    std::vector<std::string> errors;
    EXPECT_TRUE(Journal(fs).load_all_mdevs(&errors).empty());
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0], "run/vfiod/mdev-" + uuid +
                             ": larger than 4096 bytes: not an entry vfiod wrote");
}

TEST(MdevJournal, LoadsOnlyEntriesNamedForTheirUuid) {
    FakeTree tree;
    KernelHostFs fs(tree.root());
    Journal j(fs);
    const std::string a = "6d966230-f3a1-5551-97f3-4aec0da0213a";
    const std::string b = "28d550f8-3199-5203-b180-2f24319b7451";
    ASSERT_EQ(j.store_mdev({a, "mbochs", "mbochs-small", true, {}}), 0);
    MdevJournalEntry elsewhere{b, "mbochs", "mbochs-small", true, {}};
    tree.write_file("run/vfiod/mdev-" + a.substr(0, 35) + "b", serialize(elsewhere));
    tree.write_file("run/vfiod/mdev-junk", serialize(elsewhere));
    std::vector<std::string> errors;
    auto all = j.load_all_mdevs(&errors);
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].uuid, a);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].find("names mdev " + b), std::string::npos) << errors[0];
    EXPECT_EQ(j.remove_mdev(a), 0);
    EXPECT_EQ(j.remove_mdev("../group-1"), EINVAL);
    EXPECT_TRUE(fs.exists("run/vfiod/mdev-" + a.substr(0, 35) + "b"));  // left alone
}
