// The NVML backend's settings read from text (csrc/nvml/settings.*).
#include "nvml/settings.hpp"

#include <string>
#include <vector>

#include "tests/check.hpp"

using namespace flinkgpu;

namespace {

std::string read(const std::vector<std::string>& tokens, ScriptSettings* out) {
    return read_script_settings(parse_script_args(tokens), out);
}

}  // namespace

TEST_CASE(flags_not_given_leave_the_defaults) {
    ScriptSettings s;
    CHECK(read({"--enable-coordination-mode"}, &s).empty());
    CHECK(!s.busy_given && s.busy == BusyPolicy::kAvoid);
    CHECK(!s.nvml_timeout_given && s.nvml_timeout == kDefaultNvmlTimeoutSeconds);
}

TEST_CASE(valid_values_are_read) {
    ScriptSettings s;
    CHECK(read({"--busy-gpus", " Exclude ", "--nvml-timeout", "300 ms"}, &s).empty());
    CHECK(s.busy_given && s.busy == BusyPolicy::kExclude);
    CHECK(s.nvml_timeout_given && s.nvml_timeout == 0.3);
}

TEST_CASE(a_bad_value_names_the_flag_the_value_and_what_is_accepted) {
    ScriptSettings s;
    s.busy = BusyPolicy::kIgnore;
    CHECK(read({"--busy-gpus", "never"}, &s) == "--busy-gpus must be one of avoid, exclude, ignore, got 'never'");
    CHECK(s.busy == BusyPolicy::kIgnore);  // untouched on failure
    CHECK(read({"--nvml-timeout", "0 s"}, &s) ==
          "--nvml-timeout must be a positive duration such as '5 s' or '500 ms', got '0 s': it must be positive");
    const std::string later = read({"--nvml-timeout", "later"}, &s);
    CHECK(later.rfind("--nvml-timeout must be a positive duration such as '5 s' or '500 ms', got 'later': ", 0) == 0);
    CHECK(read({"--busy-gpus"}, &s) == "--busy-gpus must be one of avoid, exclude, ignore, got ''");
}

TEST_CASE(health_checks_apply_left_to_right_with_case_and_blanks_ignored) {
    CheckSet checks;
    CHECK(read_health_checks("all", &checks).empty());
    CHECK(checks == all_checks());
    CHECK(read_health_checks(" ALL , - inforom ", &checks).empty());
    CHECK(checks.count() == kCheckCount - 1 && !checks.test(static_cast<std::size_t>(Check::kInforom)));
    CHECK(read_health_checks("-all,inforom", &checks).empty());
    CHECK(checks.count() == 1 && checks.test(static_cast<std::size_t>(Check::kInforom)));
}

TEST_CASE(an_unknown_health_check_names_the_item_and_what_is_accepted) {
    CheckSet checks = all_checks();
    const std::string wrong = read_health_checks("all,-nothing", &checks);
    CHECK(wrong.rfind("'-nothing' is not a health check; use all, inforom, ", 0) == 0);
    CHECK(wrong.find("each optionally prefixed with '-' to leave it out (e.g. 'all,-inforom')") != std::string::npos);
    CHECK(checks == all_checks());  // untouched on failure
    CHECK(!read_health_checks("", &checks).empty());
}

int main(int argc, char** argv) { return check::run(argc, argv); }
