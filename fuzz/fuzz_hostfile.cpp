// Fuzz target: `meshplan launch --hostfile FILE` (parse_hostfile,
// executor/train/cluster_launch.hpp). A rejected hostfile names the file
// and line; an accepted one lists hosts whose names are one word, with slot
// counts from 1 to a million and a total that hostfile_slots can add up
// (UBSan reports an overflow). shell_quoted of each host name must be one
// shell word.
#include <cstddef>
#include <cstdint>
#include <string>

#include "executor/train/cluster_launch.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto hosts = exec::parse_hostfile(text, "fuzz-hostfile");
  fuzz::check_loaded(hosts, "fuzz-hostfile");
  if (!hosts.ok()) return 0;
  fuzz::require(!hosts.value.empty(), "an accepted hostfile names a host");
  for (const exec::HostSlots& h : hosts.value) {
    fuzz::require(!h.host.empty() && h.host.find_first_of(" \t\n\r#=") == std::string::npos, "a host is one word");
    fuzz::require(!h.slots || (*h.slots >= 1 && *h.slots <= 1000000), "slots from 1 to a million");
    const std::string quoted = exec::shell_quoted(h.host);
    fuzz::require(!quoted.empty(), "a quoted host is a word");
  }
  (void)exec::hostfile_slots(hosts.value);
  return 0;
}
