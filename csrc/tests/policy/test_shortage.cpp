// The one shortage sentence (csrc/policy/shortage.*).
#include "policy/shortage.hpp"

#include <string>

#include "tests/check.hpp"

using flinkgpu::policy::shortage_sentence;

TEST_CASE(the_sentence_names_the_amount_the_usable_the_total_and_each_gpu_left_out) {
    CHECK_EQ(shortage_sentence("2", 1, 3, "devices NVML lists",
                               {{"0", "unhealthy: InfoROM corrupted"}, {"2", "unknown: not read in time"}}),
             std::string("2 GPUs requested, but 1 of the 3 devices NVML lists is usable: GPU 0 is left out "
                         "(unhealthy: InfoROM corrupted); GPU 2 is left out (unknown: not read in time)."));
}

TEST_CASE(the_sentence_without_a_gpu_left_out_ends_after_the_count) {
    CHECK_EQ(shortage_sentence("1", 0, 0, "given", {}),
             std::string("1 GPU requested, but 0 of the 0 given are usable."));
    CHECK_EQ(shortage_sentence("5", 4, 4, "devices NVML lists", {}),
             std::string("5 GPUs requested, but 4 of the 4 devices NVML lists are usable."));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
