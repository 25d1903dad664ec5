// The one rule for a process id a caller names: 1 to kMaxPid, one sentence naming the value.
#include "base/process_id.hpp"

#include <string>

#include "tests/check.hpp"

using flinkgpu::check_pid;
using flinkgpu::kMaxPid;

TEST_CASE(a_process_id_is_1_to_the_largest_pid) {
    CHECK(check_pid(1, "owner pid").ok());
    CHECK(check_pid(kMaxPid, "owner pid").ok());
    for (long long wrong : {0LL, -1LL, kMaxPid + 1, -kMaxPid - 1}) {
        const flinkgpu::Status st = check_pid(wrong, "owner pid");
        CHECK(st.code == flinkgpu::StatusCode::kInvalidArgument);
        CHECK_EQ(st.message, "Invalid owner pid " + std::to_string(wrong) +
                                 ": it must be a positive process id, at most 2147483647.");
    }
}

TEST_CASE(a_process_id_too_wide_for_a_long_long_is_named_as_written) {
    const flinkgpu::Status st = check_pid(9223372036854775807LL, "pid", "100000000000000000000");
    CHECK_EQ(st.message, "Invalid pid 100000000000000000000: it must be a positive process id, at most 2147483647.");
}

int main(int argc, char** argv) { return check::run(argc, argv); }
