// The NVML backend's settings read from text (csrc/nvml/settings.*).
#include "nvml/settings.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "tests/check.hpp"

using namespace flinkgpu;

namespace {

SettingsText flags(const std::vector<std::string>& tokens) {
    SettingsText text;
    text.script = parse_script_args(tokens);
    text.flags_on_command_line = true;
    return text;
}

SettingsText parameters(const std::vector<std::string>& tokens) {
    SettingsText text;
    text.script = parse_script_args(tokens);
    text.key_prefix = "external-resource.gpu.param.";
    return text;
}

ParameterText given(const char* text) { return ParameterText{true, text}; }

}  // namespace

TEST_CASE(nothing_given_reads_the_defaults) {
    const Settings s = read_settings(flags({"--enable-coordination-mode"}));
    CHECK(s.busy == BusyPolicy::kAvoid && s.nvml_timeout == kDefaultNvmlTimeoutSeconds);
    CHECK(s.health_checks == all_checks() && s.metrics_interval == 5.0);
    CHECK(s.parameter_errors.empty() && s.flag_error.empty() && s.warnings.empty());
}

TEST_CASE(valid_flags_are_read) {
    const Settings s = read_settings(flags({"--busy-gpus", " Exclude ", "--nvml-timeout", "300 ms"}));
    CHECK(s.busy == BusyPolicy::kExclude && s.nvml_timeout == 0.3 && s.flag_error.empty());
}

TEST_CASE(a_bad_flag_names_the_flag_the_value_and_what_is_accepted_and_reads_as_not_given) {
    Settings s = read_settings(flags({"--busy-gpus", "never", "--nvml-timeout", "300 ms"}));
    CHECK(s.flag_error == "Invalid value 'never' for --busy-gpus: expected one of avoid, exclude, ignore.");
    CHECK(s.busy == BusyPolicy::kAvoid && s.nvml_timeout == 0.3);
    CHECK(read_settings(flags({"--nvml-timeout", "0 s"})).flag_error ==
          "Invalid value '0 s' for --nvml-timeout: expected a positive duration such as '5 s' or '500 ms' "
          "(it is not positive).");
    s = read_settings(flags({"--nvml-timeout", "later"}));
    CHECK(s.flag_error.rfind("Invalid value 'later' for --nvml-timeout: expected a positive duration such as "
                             "'5 s' or '500 ms' (",
                             0) == 0);
    CHECK(s.nvml_timeout == kDefaultNvmlTimeoutSeconds);
    CHECK(read_settings(flags({"--busy-gpus"})).flag_error ==
          "Invalid value '' for --busy-gpus: expected one of avoid, exclude, ignore.");
}

TEST_CASE(a_flag_in_the_driver_args_is_named_with_the_args_key) {
    const Settings s = read_settings(parameters({"--busy-gpus", "never"}));
    CHECK(s.flag_error ==
          "Invalid value 'never' for --busy-gpus in key 'external-resource.gpu.param.discovery-script.args': "
          "expected one of avoid, exclude, ignore.");
}

TEST_CASE(a_parameter_wins_over_its_flag_with_a_warning_when_they_differ) {
    SettingsText text = parameters({"--busy-gpus", "exclude", "--nvml-timeout", "2 s"});
    text.busy_gpus = given("Avoid");
    text.nvml_timeout = given("2000 ms");
    Settings s = read_settings(text);
    CHECK(s.busy == BusyPolicy::kAvoid && s.nvml_timeout == 2.0);
    CHECK(s.warnings.size() == 1);  // the same timeout written two ways is no conflict
    CHECK(s.warnings[0] ==
          "'external-resource.gpu.param.busy-gpus' is 'avoid' but 'external-resource.gpu.param.discovery-script.args' "
          "has --busy-gpus exclude; using 'avoid'.");
    text.nvml_timeout = given("1 s");
    s = read_settings(text);
    CHECK(s.nvml_timeout == 1.0 && s.warnings.size() == 2);
}

TEST_CASE(a_bad_parameter_names_its_key_and_reads_as_unset_so_its_flag_or_default_applies) {
    SettingsText text = parameters({"--busy-gpus", "exclude"});
    text.busy_gpus = given("sometimes");
    text.nvml_timeout = given("0 s");
    text.health_checks = given("all,-nothing");
    text.metrics_interval = given("10 ms");
    const Settings s = read_settings(text);
    CHECK(s.busy == BusyPolicy::kExclude && s.nvml_timeout == kDefaultNvmlTimeoutSeconds);
    CHECK(s.health_checks == all_checks() && s.metrics_interval == 5.0);
    CHECK(s.parameter_errors.size() == 4);
    CHECK(s.parameter_errors[0] ==
          "Invalid value '0 s' for key 'external-resource.gpu.param.nvml-timeout': expected a positive duration "
          "such as '5 s' or '500 ms' (it is not positive).");
    CHECK(s.parameter_errors[1] ==
          "Invalid value 'sometimes' for key 'external-resource.gpu.param.busy-gpus': expected one of avoid, "
          "exclude, ignore.");
    CHECK(s.parameter_errors[2].rfind("Invalid value 'all,-nothing' for key 'external-resource.gpu.param.health-"
                                      "checks': '-nothing' is not a health check; use all, inforom, ",
                                      0) == 0);
    CHECK(s.parameter_errors[3] ==
          "Invalid value '10 ms' for key 'external-resource.gpu.param.metrics.interval': expected a duration of at "
          "least 1 s, how often the GPU gauges read NVML at most (it is less; default 5 s).");
}

TEST_CASE(valid_parameters_are_read) {
    SettingsText text = parameters({});
    text.health_checks = given(" ALL , - inforom ");
    text.metrics_interval = given("2 min");
    text.nvml_timeout = given("300ms");
    const Settings s = read_settings(text);
    CHECK(s.parameter_errors.empty() && s.metrics_interval == 120.0 && s.nvml_timeout == 0.3);
    CHECK(!s.health_checks.test(static_cast<std::size_t>(Check::kInforom)) &&
          s.health_checks.count() == kCheckCount - 1);
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

TEST_CASE(a_calls_arguments_are_named_as_the_call_names_them) {
    SettingsText text;
    text.parameters_are_arguments = true;
    text.nvml_timeout = given("later");
    text.metrics_interval = given("10 ms");
    const Settings s = read_settings(text);
    CHECK(s.parameter_errors.size() == 2);
    CHECK(s.parameter_errors[0].rfind("Invalid value 'later' for nvml_timeout: expected a positive duration", 0) == 0);
    CHECK(s.parameter_errors[1].rfind("Invalid value '10 ms' for metrics_interval: ", 0) == 0);
}

TEST_CASE(an_nvml_timeout_in_seconds_is_one_check_positive_and_finite) {
    CHECK(check_nvml_timeout(0.001, "timeout").ok() && check_nvml_timeout(1e9, "timeout").ok());
    CHECK_EQ(check_nvml_timeout(0, "NVML timeout").message,
             std::string("Invalid NVML timeout 0: it must be a positive, finite number of seconds."));
    CHECK_EQ(check_nvml_timeout(-1.5, "nvml_timeout").message,
             std::string("Invalid nvml_timeout -1.5: it must be a positive, finite number of seconds."));
    CHECK(!check_nvml_timeout(std::nan(""), "t").ok() && !check_nvml_timeout(HUGE_VAL, "t").ok());
    CHECK(check_nvml_timeout(0, "t").code == StatusCode::kInvalidArgument);
}

TEST_CASE(health_check_names_are_only_names_not_the_options_grammar) {
    CheckSet checks = all_checks();
    CHECK(check_names({"inforom", "ecc"}, "health_checks", &checks).ok());
    CHECK(checks.count() == 2 && checks.test(static_cast<std::size_t>(Check::kInforom)));
    CHECK(check_names({}, "health_checks", &checks).ok() && checks.none());
    for (const char* wrong : {"all", "-inforom", "INFOROM", " inforom", "fans"}) {
        checks = all_checks();
        const Status st = check_names({"ecc", wrong}, "health_checks", &checks);
        CHECK(st.code == StatusCode::kInvalidArgument && checks == all_checks());  // untouched on failure
        CHECK(st.message.rfind(
                  std::string("Invalid health_checks: '") + wrong + "' is not a health check; use inforom, ", 0) == 0);
    }
}

int main(int argc, char** argv) { return check::run(argc, argv); }
