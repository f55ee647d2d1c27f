// Writing outputs and checking inputs (model/atomic_file.hpp): a device or a
// pipe is written in place, a symbolic link's target is replaced rather than
// the link, and a device is not read as an input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/atomic_file.hpp"

namespace meshplan {
namespace {

namespace fs = std::filesystem;

fs::path fresh_folder(const std::string& name) {
  const fs::path folder = fs::temp_directory_path() / ("meshplan-atomic-" + name + "-" +
                                                       std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(folder);
  fs::create_directories(folder);
  return folder;
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `--report /dev/null` as root renamed a temporary over /dev/null, leaving a
// regular file. Through a link to it (so that a regression replaces the link,
// not the device), the device is written in place and stays a device.
TEST(AtomicFile, ADeviceIsWrittenInPlace) {
  ASSERT_TRUE(fs::is_character_file("/dev/null"));
  const fs::path folder = fresh_folder("device");
  const fs::path link = folder / "discard.json";
  fs::create_symlink("/dev/null", link);
  const Problems problems = write_file_atomically(link.string(), [](std::ostream& out) { out << "{}\n"; });
  EXPECT_TRUE(problems.empty()) << describe(problems.front());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_FALSE(fs::exists(folder / "discard.json.tmp"));
  if (fs::is_character_file("/dev/full")) {  // a write that fails says so
    const Problems full = write_file_atomically("/dev/full", [](std::ostream& out) { out << std::string(1 << 16, 'x'); });
    ASSERT_FALSE(full.empty());
    EXPECT_NE(full.front().message.find("write failed"), std::string::npos) << full.front().message;
    EXPECT_TRUE(fs::is_character_file("/dev/full"));
  }
  fs::remove_all(folder);
}

// A link to a file: the file gets the new content, the link stays a link.
TEST(AtomicFile, ALinksTargetIsReplacedNotTheLink) {
  const fs::path folder = fresh_folder("link");
  std::ofstream(folder / "real.json") << "old\n";
  fs::create_symlink("real.json", folder / "link.json");
  const Problems problems = write_file_atomically((folder / "link.json").string(), [](std::ostream& out) { out << "new\n"; });
  EXPECT_TRUE(problems.empty()) << describe(problems.front());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(folder / "link.json")));
  EXPECT_EQ(read_all(folder / "real.json"), "new\n");
  fs::remove_all(folder);
}

// A link to a file that does not exist yet: the target is written (the link
// was replaced by a plain file, the target never made); a loop is refused.
TEST(AtomicFile, ADanglingLinksTargetIsWrittenAndALoopRefused) {
  const fs::path folder = fresh_folder("dangling");
  fs::create_directories(folder / "sub");
  fs::create_symlink("sub/later.json", folder / "link.json");
  EXPECT_TRUE(write_file_atomically((folder / "link.json").string(), [](std::ostream& out) { out << "made\n"; }).empty());
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(folder / "link.json")));
  EXPECT_EQ(read_all(folder / "sub" / "later.json"), "made\n");
  fs::create_symlink("b.json", folder / "a.json");
  fs::create_symlink("a.json", folder / "b.json");
  const Problems loop = write_file_atomically((folder / "a.json").string(), [](std::ostream& out) { out << "x"; });
  ASSERT_FALSE(loop.empty());
  EXPECT_NE(loop.front().message.find("is a loop of symbolic links"), std::string::npos) << loop.front().message;
  fs::remove_all(folder);
}

// /dev/zero as an input was read until memory ran out (exit 71).
TEST(AtomicFile, ADeviceIsNotAnInput) {
  ASSERT_TRUE(fs::is_character_file("/dev/zero"));
  const auto why = why_unreadable("/dev/zero");
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(*why, "is a device or a socket, not a file");
  const fs::path folder = fresh_folder("input");
  std::ofstream(folder / "plan.json") << "{}";
  EXPECT_FALSE(why_unreadable((folder / "plan.json").string()).has_value());
  EXPECT_EQ(why_unreadable(folder.string()).value_or(""), "is a folder, not a file");
  fs::remove_all(folder);
}

}  // namespace
}  // namespace meshplan
