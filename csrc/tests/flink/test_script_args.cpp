// The stock discovery script's argument grammar after the amount, and the flag suggestion.
#include "flink/script_args.hpp"

#include <string>
#include <vector>

#include "tests/check.hpp"

using flinkgpu::parse_script_args;
using flinkgpu::suggest_flag;
using flinkgpu::with_coordination_file;
using V = std::vector<std::string>;

namespace {
const std::string kDefault = flinkgpu::kDefaultCoordinationFile;

V unknown_tokens(const flinkgpu::ScriptArgs& a) {
    V out;
    for (const auto& u : a.unknown) out.push_back(u.token);
    return out;
}
}  // namespace

TEST_CASE(no_tokens_is_the_default_file_without_coordination) {
    auto a = parse_script_args({});
    CHECK(!a.coordination_mode);
    CHECK_EQ(a.coordination_file, kDefault);
    CHECK(!a.file_value_missing);
    CHECK(a.unknown.empty());
}

TEST_CASE(null_is_ignored_without_a_note) {
    flinkgpu::ScriptArgs a;
    // "null" is what Flink passes when no args are configured: ignored without a note.
    a = parse_script_args({"null"});
    CHECK(a.unknown.empty());
}

TEST_CASE(the_stock_flags_set_mode_and_file) {
    flinkgpu::ScriptArgs a;
    a = parse_script_args({"--enable-coordination-mode", "--coordination-file", "/x/f"});
    CHECK(a.coordination_mode);
    CHECK_EQ(a.coordination_file, std::string("/x/f"));
    CHECK(!a.file_value_missing);
}

TEST_CASE(the_token_after_coordination_file_is_the_file_whatever_it_is) {
    flinkgpu::ScriptArgs a;
    // The token after --coordination-file is the file, whatever it looks like.
    a = parse_script_args({"--coordination-file", "--enable-coordination-mode"});
    CHECK(!a.coordination_mode);
    CHECK_EQ(a.coordination_file, std::string("--enable-coordination-mode"));
    a = parse_script_args({"--coordination-file", "null"});
    CHECK_EQ(a.coordination_file, std::string("null"));
}

TEST_CASE(a_missing_or_empty_file_value_is_the_default_and_said) {
    flinkgpu::ScriptArgs a;
    // No value (last token) or an empty one: the default file, and it is said.
    a = parse_script_args({"--enable-coordination-mode", "--coordination-file"});
    CHECK(a.coordination_mode);
    CHECK_EQ(a.coordination_file, kDefault);
    CHECK(a.file_value_missing);
    a = parse_script_args({"--coordination-file", "", "--enable-coordination-mode"});
    CHECK(a.coordination_mode);
    CHECK_EQ(a.coordination_file, kDefault);
    CHECK(a.file_value_missing);
    CHECK(a.unknown.empty());
    // A later missing value resets an earlier file, as the stock script's assignment does.
    a = parse_script_args({"--coordination-file", "/a", "--coordination-file"});
    CHECK_EQ(a.coordination_file, kDefault);
    CHECK(a.file_value_missing);
}

TEST_CASE(unknown_tokens_are_kept_in_order_with_a_suggestion) {
    flinkgpu::ScriptArgs a;
    // Unknown tokens are kept in order, with the flag they probably meant.
    a = parse_script_args({"--enable-coordination", "--verbose", "", "x"});
    CHECK_EQ(unknown_tokens(a), (V{"--enable-coordination", "--verbose", "", "x"}));
    CHECK_EQ(a.unknown[0].suggestion, std::string("--enable-coordination-mode"));
    CHECK_EQ(a.unknown[1].suggestion, std::string(""));
    CHECK(!a.coordination_mode);
}

TEST_CASE(typos_and_the_replaced_coordination_file) {
    CHECK_EQ(suggest_flag("--enable-coordination"), std::string("--enable-coordination-mode"));
    CHECK_EQ(suggest_flag("--enable-coordination-mod"), std::string("--enable-coordination-mode"));
    CHECK_EQ(suggest_flag("-enable-coordination-mode"), std::string("--enable-coordination-mode"));
    CHECK_EQ(suggest_flag("--coordination"), std::string("--coordination-file"));
    CHECK_EQ(suggest_flag("--coordinationfile"), std::string("--coordination-file"));
    CHECK_EQ(suggest_flag("--coordination_file"), std::string("--coordination-file"));
    CHECK_EQ(suggest_flag("--busy-gpu"), std::string("--busy-gpus"));
    CHECK_EQ(suggest_flag("--busygpus"), std::string("--busy-gpus"));
    // abbreviations keeping half the flag, and a flag with something appended
    // The coordination file replaced, as parse_script_args reads the flag and its value.
    CHECK(with_coordination_file({}, "/s") == (V{"--coordination-file", "/s"}));
    CHECK(with_coordination_file({"--enable-coordination-mode", "--coordination-file", "/x", "--foo"}, "/s") ==
          (V{"--enable-coordination-mode", "--foo", "--coordination-file", "/s"}));
    CHECK(with_coordination_file({"--enable-coordination-mode", "--coordination-file"}, "/s") ==
          (V{"--enable-coordination-mode", "--coordination-file", "/s"}));
    // the flag after --coordination-file is its value: the script never saw it as a flag
    CHECK(with_coordination_file({"--coordination-file", "--enable-coordination-mode"}, "/s") ==
          (V{"--coordination-file", "/s"}));
    CHECK(with_coordination_file({"--coordination-file", "", "--coordination-file", "/b", "null"}, "/s") ==
          (V{"null", "--coordination-file", "/s"}));
    // --busy-gpus takes the next token as its value, even --coordination-file
    CHECK(with_coordination_file({"--busy-gpus", "--coordination-file", "/x"}, "/s") ==
          (V{"--busy-gpus", "--coordination-file", "/x", "--coordination-file", "/s"}));
    CHECK_EQ(
        parse_script_args(with_coordination_file({"--busy-gpus", "--coordination-file", "/x"}, "/s")).coordination_file,
        std::string("/s"));
}

TEST_CASE(abbreviations_suggest_the_flag_they_begin) {
    CHECK_EQ(suggest_flag("--enable-coord"), std::string("--enable-coordination-mode"));
    CHECK_EQ(suggest_flag("--enable-coor"), std::string("--enable-coordination-mode"));
    CHECK_EQ(suggest_flag("--coordina"), std::string("--coordination-file"));
    CHECK_EQ(suggest_flag("--busy"), std::string("--busy-gpus"));
    CHECK_EQ(suggest_flag("--coordination-file=/tmp/x"), std::string("--coordination-file"));
    CHECK_EQ(suggest_flag("--enable-coordination-mode-please"), std::string("--enable-coordination-mode"));
    CHECK_EQ(suggest_flag("--busy-gpus=0,1"), std::string("--busy-gpus"));
    CHECK_EQ(suggest_flag("--enable-coo"), std::string(""));                                   // under half: 11 of 26
    CHECK_EQ(suggest_flag("enable-coordination"), std::string("--enable-coordination-mode"));  // similar
    CHECK_EQ(suggest_flag("--verbose"), std::string(""));
    CHECK_EQ(suggest_flag("--enable"), std::string(""));
    CHECK_EQ(suggest_flag(""), std::string(""));
    CHECK_EQ(suggest_flag(std::string(10000, '-')), std::string(""));
}

TEST_CASE(busy_gpus_takes_the_next_token) {
    flinkgpu::ScriptArgs a;
    // --busy-gpus takes the next token, whatever it is; absent: not given.
    a = parse_script_args({"--busy-gpus", "exclude", "--enable-coordination-mode"});
    CHECK(a.has_busy_gpus);
    CHECK_EQ(a.busy_gpus, std::string("exclude"));
    CHECK(a.coordination_mode && a.unknown.empty());
    a = parse_script_args({"--busy-gpus", "--enable-coordination-mode"});
    CHECK_EQ(a.busy_gpus, std::string("--enable-coordination-mode"));
    CHECK(!a.coordination_mode);
    a = parse_script_args({"--enable-coordination-mode", "--busy-gpus"});
    CHECK(a.has_busy_gpus && a.busy_gpus.empty());
    a = parse_script_args({"null"});
    CHECK(!a.has_busy_gpus);
}

TEST_CASE(nvml_timeout_takes_the_next_token) {
    flinkgpu::ScriptArgs a = parse_script_args({"--nvml-timeout", "2 s", "--enable-coordination-mode"});
    CHECK(a.has_nvml_timeout);
    CHECK_EQ(a.nvml_timeout, std::string("2 s"));
    CHECK(a.coordination_mode && a.unknown.empty());
    a = parse_script_args({"--nvml-timeout", "--enable-coordination-mode"});
    CHECK_EQ(a.nvml_timeout, std::string("--enable-coordination-mode"));
    CHECK(!a.coordination_mode);
    a = parse_script_args({"--enable-coordination-mode", "--nvml-timeout"});
    CHECK(a.has_nvml_timeout && a.nvml_timeout.empty());
    CHECK(!parse_script_args({"null"}).has_nvml_timeout);
    CHECK_EQ(suggest_flag("--nvml-timout"), std::string("--nvml-timeout"));
    CHECK_EQ(suggest_flag("--nvml-timeout=2s"), std::string("--nvml-timeout"));
    CHECK(with_coordination_file({"--nvml-timeout", "--coordination-file", "/x"}, "/s") ==
          (V{"--nvml-timeout", "--coordination-file", "/x", "--coordination-file", "/s"}));
}

TEST_CASE(help_asks_for_the_usage_only_where_the_amount_goes) {
    using flinkgpu::asks_for_usage;
    CHECK(asks_for_usage({"--help"}));
    CHECK(asks_for_usage({"-h"}));
    CHECK(asks_for_usage({"--help", "2", "--enable-coordination-mode"}));
    // Flink's call: the amount first, then discovery-script.args, where --help is no flag of the grammar
    CHECK(!asks_for_usage({"2", "--help"}));
    CHECK(!asks_for_usage({"1", "-h"}));
    CHECK(!asks_for_usage({}));
    CHECK(!asks_for_usage({"--HELP"}));
    CHECK(!asks_for_usage({"-help"}));
    CHECK(!asks_for_usage({"--help=1"}));
    CHECK(!asks_for_usage({""}));
    const flinkgpu::ScriptArgs a = parse_script_args({"--help", "-h", "--enable-coordination-mode"});
    CHECK(a.coordination_mode);
    CHECK(unknown_tokens(a) == (V{"--help", "-h"}));
    // the value of a flag that takes one, whatever it is
    CHECK_EQ(parse_script_args({"--coordination-file", "--help"}).coordination_file, std::string("--help"));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
