// The GPU index order: numeric by value (MIG units by both parts), then the rest as text.
#include "base/gpu_index.hpp"

#include <string>
#include <vector>

#include "tests/check.hpp"

using flinkgpu::compare_indices;
using V = std::vector<std::string>;

TEST_CASE(gpu_indices_compare_by_value_then_as_text) {
    CHECK(compare_indices("2", "10") < 0);
    CHECK(compare_indices("10", "2") > 0);
    CHECK_EQ(compare_indices("7", "7"), 0);
    // Equal values: the text decides, so the order is total.
    CHECK(compare_indices("02", "2") < 0);
    CHECK(compare_indices("0", "00") < 0);
    // Numbers before everything else, even text that sorts lower byte-wise.
    CHECK(compare_indices("9", "!") < 0);
    CHECK(compare_indices("", "0") > 0);
    CHECK(compare_indices("1a", "2") > 0);
    CHECK(compare_indices("GPU-a", "GPU-b") < 0);
    // Beyond 64 bits: no overflow, still by value.
    CHECK(compare_indices("99999999999999999999", "100000000000000000000") < 0);
    // Bytes compare unsigned: UTF-8 text sorts by code point.
    CHECK(compare_indices("z", "\xC3\xA9") < 0);
}

TEST_CASE(mig_units_sort_after_their_gpu_and_before_the_next) {
    // MIG units "<gpu>:<slot>": numeric on both parts, each GPU's units after it and before the next GPU.
    CHECK(compare_indices("0:2", "0:10") < 0);
    CHECK(compare_indices("0", "0:0") < 0);
    CHECK(compare_indices("0:99", "1") < 0);
    CHECK(compare_indices("2:1", "10") < 0);
    CHECK(compare_indices("0:02", "0:2") < 0);
    CHECK(compare_indices("0:1", "a") < 0);
    CHECK(compare_indices("0:", "1") > 0);  // not a unit index: text
    CHECK(compare_indices("0:1:2", "1") > 0);
    V units{"1", "0:10", "0:2", "10", "0", "2:0", "0:5"};
    flinkgpu::sort_indices(&units);
    CHECK_EQ(units, (V{"0", "0:2", "0:5", "0:10", "1", "2:0", "10"}));
}

TEST_CASE(sorting_puts_numbers_first_and_text_last) {
    V v{"10", "b", "2", "02", "a", "1", "", "0"};
    flinkgpu::sort_indices(&v);
    CHECK_EQ(v, (V{"0", "1", "02", "2", "10", "", "a", "b"}));
    V empty;
    flinkgpu::sort_indices(&empty);
    CHECK(empty.empty());
}

TEST_CASE(a_gpu_and_its_mig_units_name_one_gpu_number) {
    unsigned gpu = 99;
    CHECK(flinkgpu::gpu_of("3", &gpu) && gpu == 3);
    CHECK(flinkgpu::gpu_of("12:4", &gpu) && gpu == 12);
    CHECK(flinkgpu::gpu_of("0", &gpu) && gpu == 0);
    for (const char* other : {"", "03", "a", "3:", ":1", "3:x", "3:1:2", "1234567890", "-1"}) {
        gpu = 99;
        CHECK(!flinkgpu::gpu_of(other, &gpu) && gpu == 99);
    }
}

int main(int argc, char** argv) { return check::run(argc, argv); }
