// The coordination file's line format, without any file: parse, serialize, new lines.
#include "coordination/lines.hpp"

#include <string>

#include "tests/check.hpp"

namespace co = flinkgpu::coordination;

namespace {
// pid 1234 with start time 987, our namespace and lease slot 7.
co::HolderIdentity started_holder() {
    co::HolderIdentity started;
    started.pid = 1234;
    started.has_start_time = true;
    started.start_time = 987;
    return started;
}
co::HolderIdentity full_holder() {
    co::HolderIdentity all = started_holder();
    all.has_ns = true;
    all.ns = 4026531836u;
    all.has_lease = true;
    all.lease = 7;
    return all;
}
}  // namespace

TEST_CASE(lines_parse_into_entries_blanks_and_bad_lines_with_their_numbers) {
    const auto lines = co::parse_file("0 100\n1 200\t5555\n\n  \t\r\n3  300\ngarbage\n4 0\n5 1 2 3\n 6 1\n7 9");
    CHECK_EQ(lines.size(), std::size_t{10});
    CHECK(lines[0].kind == co::LineKind::kEntry && lines[0].entry.index == "0" && lines[0].entry.pid == 100);
    CHECK(!lines[0].entry.has_start_time);
    CHECK(lines[1].kind == co::LineKind::kEntry && lines[1].entry.has_start_time);
    CHECK_EQ(lines[1].entry.start_time, std::uint64_t{5555});
    CHECK_EQ(lines[1].entry.line_number, std::size_t{2});
    CHECK(lines[2].kind == co::LineKind::kBlank && lines[3].kind == co::LineKind::kBlank);
    CHECK(lines[4].kind == co::LineKind::kEntry && lines[4].entry.pid == 300);  // blanks split like awk
    CHECK(lines[5].kind == co::LineKind::kBad && lines[5].word == "garbage");
    CHECK(lines[6].kind == co::LineKind::kBad && lines[6].word == "4");     // pid 0 is nobody
    CHECK(lines[7].kind == co::LineKind::kBad && lines[7].word == "5");     // too many fields
    CHECK(lines[8].kind == co::LineKind::kBad && lines[8].word == "6");     // the index must start the line
    CHECK(lines[9].kind == co::LineKind::kEntry && lines[9].raw == "7 9");  // no final '\n'
    const auto bad = co::bad_lines(lines);
    CHECK_EQ(bad.size(), std::size_t{4});
    CHECK_EQ(bad[0].line_number, std::size_t{6});
    CHECK_EQ(bad[0].text, std::string("garbage"));
}

TEST_CASE(a_pid_beyond_int_max_a_start_time_beyond_64_bits_or_a_tab_after_the_index_is_bad) {
    // pid and start time bounds: a pid beyond INT_MAX or a start time beyond 64 bits is no entry.
    CHECK(co::parse_file("0 2147483647")[0].kind == co::LineKind::kEntry);
    CHECK(co::parse_file("0 2147483648")[0].kind == co::LineKind::kBad);
    CHECK(co::parse_file("0 1\t18446744073709551615")[0].kind == co::LineKind::kEntry);
    CHECK(co::parse_file("0 1\t18446744073709551616")[0].kind == co::LineKind::kBad);
    // A tab instead of the space after the index is not what the stock script's grep "^$i " finds.
    CHECK(co::parse_file("0\t1")[0].kind == co::LineKind::kBad);
}

TEST_CASE(serialize_writes_the_kept_lines_byte_for_byte) {
    // serialize: kept lines only, each ended by '\n', byte for byte.
    auto edited = co::parse_file("a b c d\n0 1\n\n2 3");
    edited[1].keep = false;
    CHECK_EQ(co::serialize(edited), std::string("a b c d\n\n2 3\n"));
    CHECK_EQ(co::serialize(co::parse_file("")), std::string(""));
}

TEST_CASE(new_lines_put_each_field_after_a_tab_and_parse_back) {
    // new_line: the tab before the start time, and it parses back to the same entry.
    const co::HolderIdentity started = started_holder();
    const co::Line nl = co::new_line("3", started);
    CHECK_EQ(nl.raw, std::string("3 1234\t987"));
    const co::Entry back = co::parse_file(nl.raw)[0].entry;
    CHECK(back.index == "3" && back.pid == 1234 && back.has_start_time && back.start_time == 987);
    CHECK(!back.has_ns && !back.has_lease);
    co::HolderIdentity bare;
    bare.pid = 5;
    CHECK_EQ(co::new_line("10", bare).raw, std::string("10 5"));

    // The namespace and lease fields: each after a tab, in this order; they parse back.
    co::HolderIdentity all = full_holder();
    all.pid = 42;
    const co::Line full = co::new_line("11", all);
    CHECK_EQ(full.raw, std::string("11 42\t987\tns=4026531836\tlease=7"));
    const co::Entry fe = co::parse_file(full.raw)[0].entry;
    CHECK(fe.has_start_time && fe.start_time == 987 && fe.has_ns && fe.ns == 4026531836u && fe.has_lease &&
          fe.lease == 7);
    // No "<digit><space>" after the pid: the stock script's unanchored `sed "/$i /d"` for any index other
    // than this line's own never matches inside it.
    CHECK(full.raw.find(' ', 3) == std::string::npos);
    // The namespace without a start time (unreadable), and without a lease.
    co::HolderIdentity ns_only;
    ns_only.pid = 9;
    ns_only.has_ns = true;
    ns_only.ns = 5;
    CHECK_EQ(co::new_line("0", ns_only).raw, std::string("0 9\tns=5"));
    const co::Entry ne = co::parse_file("0 9\tns=5")[0].entry;
    CHECK(!ne.has_start_time && ne.has_ns && ne.ns == 5 && !ne.has_lease);
}

TEST_CASE(old_forms_parse_unknown_fields_are_kept_and_bad_known_fields_make_a_line_bad) {
    // Old forms still parse; unknown key=value fields are kept byte for byte and ignored.
    CHECK(co::parse_file("0 1")[0].kind == co::LineKind::kEntry);
    CHECK(co::parse_file("0 1\t2")[0].kind == co::LineKind::kEntry);
    const auto future = co::parse_file("2 8\t99\tns=3\tgpu-uuid=GPU-1\tlease=0\tx.y=\n");
    CHECK(future[0].kind == co::LineKind::kEntry && future[0].entry.ns == 3 && future[0].entry.has_lease &&
          future[0].entry.lease == 0);
    CHECK_EQ(co::serialize(future), std::string("2 8\t99\tns=3\tgpu-uuid=GPU-1\tlease=0\tx.y=\n"));
    // A bad value of a known key, a key given twice, a field that is no key=value, a start time after a
    // field, a lease beyond the largest slot: unparsable (kept, the index blocked), never half-read.
    for (const char* bad :
         {"0 1\t2\tns=", "0 1\t2\tns=x", "0 1\tns=1\tns=1", "0 1\tlease=1\tlease=2", "0 1\t2\tnsx", "0 1\tns=1\t2",
          "0 1\tlease=65536", "0 1\tlease=-1", "0 1\t=3", "0 1\tn s=3", "0 1\tk\xc3\xa9=1"}) {
        const auto l = co::parse_file(bad);
        CHECK(l[0].kind == co::LineKind::kBad && l[0].word == "0");
    }
    CHECK(co::parse_file("0 1\tlease=65535")[0].entry.lease == co::kMaxLeaseSlot);
}

TEST_CASE(a_mig_units_line_names_its_gpu_first_and_the_unit_in_mig) {
    // A MIG unit's line: its GPU first, the unit in `mig` last; it parses back to the unit.
    const co::Line unit = co::new_line("0:12", full_holder());
    CHECK_EQ(unit.raw, std::string("0 1234\t987\tns=4026531836\tlease=7\tmig=0:12"));
    const co::Entry u = co::parse_file(unit.raw)[0].entry;
    CHECK(u.index == "0:12" && u.gpu == "0" && u.pid == 1234 && u.has_lease && u.lease == 7);
    CHECK(co::parse_file("1 5\tmig=0:2")[0].kind == co::LineKind::kBad);           // a unit of another GPU
    CHECK(co::parse_file("0 5\tmig=0:x")[0].kind == co::LineKind::kBad);           // not a unit index
    CHECK(co::parse_file("0 5\tmig=0:1\tmig=0:1")[0].kind == co::LineKind::kBad);  // given twice
}

TEST_CASE(a_whole_gpu_excludes_its_units_and_two_units_never_exclude_each_other) {
    // The exclusion rule: whole GPU against its units, never two different units.
    const co::Entry u = co::parse_file("0 1234\t987\tmig=0:12")[0].entry;
    const co::Entry whole = co::parse_file("0 5")[0].entry;
    CHECK(co::excludes(whole, "0") && co::excludes(whole, "0:12") && !co::excludes(whole, "1:0"));
    CHECK(co::excludes(u, "0:12") && co::excludes(u, "0") && !co::excludes(u, "0:1") && !co::excludes(u, "10"));
    CHECK(co::unit_gpu("10:3", nullptr) && !co::unit_gpu("a:3", nullptr) && !co::unit_gpu("3:", nullptr));
    CHECK_EQ(co::gpu_of("10:3"), std::string("10"));
    CHECK_EQ(co::gpu_of("GPU-a"), std::string("GPU-a"));
}

TEST_CASE(the_bindings_fields_tm_share_mem_and_slot_are_written_last_and_validated) {
    // The bindings file's fields: written after the others, parsed back; bad or repeated values unparsable.
    co::HolderIdentity bound = full_holder();
    bound.pid = 77;
    bound.tm = 42;
    bound.slot = "3f2a:b_c.d-e";
    const co::Line binding = co::new_line("0:3", bound, 2);
    CHECK_EQ(binding.raw, std::string("0 77\t987\tns=4026531836\tlease=7\tmig=0:3\ttm=42\tshare=2\tslot=3f2a:b_c.d-e"));
    const co::Entry b = co::parse_file(binding.raw)[0].entry;
    CHECK(b.index == "0:3" && b.tm == 42 && b.share == 2 && b.slot == "3f2a:b_c.d-e");
    CHECK(co::parse_file("0 1")[0].entry.tm == 0 && co::parse_file("0 1")[0].entry.slot.empty());
    for (const char* bad :
         {"0 1\ttm=0", "0 1\ttm=x", "0 1\ttm=1\ttm=1", "0 1\tshare=0", "0 1\tshare=1025", "0 1\tshare=1\tshare=1",
          "0 1\tslot=", "0 1\tslot=a/b", "0 1\tslot=a\tslot=a", "0 1\ttm=2147483648"}) {
        const auto l = co::parse_file(bad);
        CHECK(l[0].kind == co::LineKind::kBad && l[0].word == "0");
    }
    CHECK(co::parse_file("0 1\tshare=1024")[0].entry.share == co::kMaxShare);
    // a memory request (bytes): after share, before slot; 1 to a Java long
    const co::Line requested = co::new_line("1", bound, 4, 12ULL << 30);
    CHECK_EQ(requested.raw,
             std::string("1 77\t987\tns=4026531836\tlease=7\ttm=42\tshare=4\tmem=12884901888\tslot=3f2a:b_c.d-e"));
    CHECK_EQ(co::parse_file(requested.raw)[0].entry.memory, 12ULL << 30);
    CHECK_EQ(co::parse_file("0 1")[0].entry.memory, std::uint64_t{0});
    CHECK_EQ(co::parse_file("0 1\tmem=9223372036854775807")[0].entry.memory, co::kMaxMemoryRequest);
    for (const char* bad :
         {"0 1\tmem=0", "0 1\tmem=-1", "0 1\tmem=1g", "0 1\tmem=9223372036854775808", "0 1\tmem=1\tmem=1"}) {
        const auto l = co::parse_file(bad);
        CHECK(l[0].kind == co::LineKind::kBad && l[0].word == "0");
    }
    CHECK(co::valid_slot(std::string(128, 'a')) && !co::valid_slot(std::string(129, 'a')));
}

TEST_CASE(the_lease_files_token_follows_the_lease_and_must_be_16_lowercase_hex_digits) {
    // The lease file's token follows the lease (a lease proves something only on its lease file); it parses
    // back, and a token that is not 16 lowercase hex digits, or one given twice, makes the line unparsable.
    co::HolderIdentity leased = full_holder();
    leased.lease_file = "0123456789abcdef";
    const co::Line with_token = co::new_line("5", leased);
    CHECK_EQ(with_token.raw, std::string("5 1234\t987\tns=4026531836\tlease=7\tlf=0123456789abcdef"));
    CHECK_EQ(co::parse_file(with_token.raw)[0].entry.lease_file, std::string("0123456789abcdef"));
    leased.has_lease = false;  // no lease, no token
    CHECK_EQ(co::new_line("5", leased).raw, std::string("5 1234\t987\tns=4026531836"));
    for (const char* bad : {"0 1\tlease=0\tlf=0123", "0 1\tlease=0\tlf=0123456789ABCDEF",
                            "0 1\tlease=0\tlf=0123456789abcdef\tlf=0123456789abcdef", "0 1\tlease=0\tlf=None",
                            "0 1\tlease=0\tlf=none\tlf=none"}) {
        CHECK(co::parse_file(bad)[0].kind == co::LineKind::kBad);
    }
    // A lease file without a token: the line says so (`lf=none`), and it proves no lease file.
    leased.has_lease = true;
    leased.lease_file = co::kNoLeaseFileToken;
    const co::Line without_token = co::new_line("5", leased);
    CHECK_EQ(without_token.raw, std::string("5 1234\t987\tns=4026531836\tlease=7\tlf=none"));
    const co::Entry parsed = co::parse_file(without_token.raw)[0].entry;
    CHECK_EQ(parsed.lease_file, std::string("none"));
    CHECK(!parsed.lease_file_known() && !co::parse_file("0 1\tlease=0")[0].entry.lease_file_known());
    CHECK(co::parse_file("0 1\tlease=0\tlf=0123456789abcdef")[0].entry.lease_file_known());
}

TEST_CASE(an_index_has_one_spelling_per_gpu_and_unit_on_every_line) {
    CHECK(co::valid_index("0") && co::valid_index("GPU-a") && co::valid_index("~"));
    CHECK(!co::valid_index("") && !co::valid_index("0 1") && !co::valid_index("\x7f") && !co::valid_index("\xC3\xA9"));
    // One spelling per GPU and unit: another would escape the exclusion of the canonical one.
    CHECK(co::valid_index("10") && co::valid_index("0:1") && co::valid_index("10:0") && co::valid_index("card:0"));
    for (const char* bad : {"00", "01", "00:01", "0:01", "01:1", "0:", ":1", ":", "0:1:2", "::"}) {
        CHECK(!co::valid_index(bad));
    }
    CHECK(!co::unit_gpu("00:01", nullptr) && !co::unit_gpu("0:1:2", nullptr) && !co::unit_gpu(":1", nullptr));
    CHECK(co::parse_file("0 5\tmig=0:01")[0].kind == co::LineKind::kBad);
    // a line's first word follows the same rule (the fuzzer's find: a line "053183 12" was an entry)
    for (const char* bad : {"053183 12\t345", "00 123", "0:01 5", "0:1:2 5"}) {
        const auto l = co::parse_file(bad);
        CHECK(l[0].kind == co::LineKind::kBad && !l[0].word.empty());
    }
    CHECK(co::parse_file("card:0 5")[0].kind == co::LineKind::kEntry);
}

TEST_CASE(the_share_and_memory_request_bounds_are_one_check_each_naming_what_the_caller_calls_them) {
    CHECK(co::check_share(1, "x").ok() && co::check_share(co::kMaxShare, "x").ok());
    CHECK_EQ(co::check_share(0, "holders_per_gpu").message,
             std::string("Invalid holders_per_gpu 0: it must be 1 to 1024."));
    CHECK_EQ(co::check_share(1025, "number of holders per GPU").message,
             std::string("Invalid number of holders per GPU 1025: it must be 1 to 1024."));
    CHECK_EQ(co::check_share(0, "subtasks_per_gpu", "2**70").message,
             std::string("Invalid subtasks_per_gpu 2**70: it must be 1 to 1024."));
    CHECK(co::check_memory_request(0, "x").ok() && co::check_memory_request(co::kMaxMemoryRequest, "x").ok());
    const flinkgpu::Status over = co::check_memory_request(co::kMaxMemoryRequest + 1, "memory request");
    CHECK(over.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK_EQ(over.message, std::string("Invalid memory request of 9223372036854775808 bytes: it must be at most "
                                       "9223372036854775807 bytes."));
    CHECK_EQ(co::check_memory_request(UINT64_MAX, "memory", "'16 eb'").message,
             std::string("Invalid memory '16 eb': it must be at most 9223372036854775807 bytes."));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
