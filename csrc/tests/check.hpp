// Minimal test harness for the native unit tests. TEST_CASE(name) { ... } registers a named case;
// CHECK and CHECK_EQ record a failure (naming the case, the file and the line) and continue. A test
// executable's main is `return check::run(argc, argv);`: no argument runs every case, a name runs
// that case, --list prints the names (CMakeLists.txt registers each case as its own ctest test).
#pragma once

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace check {
inline int& failures() {
    static int n = 0;
    return n;
}
inline const char*& current_case() {
    static const char* name = "";
    return name;
}
inline void report(const char* file, int line, const std::string& what) {
    std::fprintf(stderr, "%s:%d: [%s] %s failed\n", file, line, current_case(), what.c_str());
    ++failures();
}
template <typename A, typename B>
void equal(const A& a, const B& b, const char* expr_a, const char* expr_b, const char* file, int line) {
    if (!(a == b)) {
        std::ostringstream msg;
        msg << "CHECK_EQ(" << expr_a << ", " << expr_b << ")";
        report(file, line, msg.str());
    }
}

struct Case {
    const char* name;
    void (*body)();
};
inline std::vector<Case>& cases() {
    static std::vector<Case> registered;
    return registered;
}
struct Registration {
    Registration(const char* name, void (*body)()) { cases().push_back({name, body}); }
};

// Runs the cases argv names (all without a name); the exit status is 0 when every check passed.
inline int run(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
        for (const Case& c : cases()) std::printf("%s\n", c.name);
        return 0;
    }
    int ran = 0;
    for (const Case& c : cases()) {
        bool selected = argc < 2;
        for (int i = 1; i < argc; ++i) selected = selected || std::strcmp(argv[i], c.name) == 0;
        if (!selected) continue;
        current_case() = c.name;
        int before = failures();
        c.body();
        std::printf("%s: %s\n", c.name, failures() == before ? "passed" : "FAILED");
        ++ran;
    }
    current_case() = "";
    if (ran == 0) {
        std::fprintf(stderr, "no test case is called %s (--list names them)\n", argc > 1 ? argv[1] : "anything");
        return 2;
    }
    return failures() == 0 ? 0 : 1;
}

}  // namespace check

#define CHECK_CASE_CONCAT2(a, b) a##b
#define CHECK_CASE_CONCAT(a, b) CHECK_CASE_CONCAT2(a, b)
// TEST_CASE(a_lost_gpu_is_unhealthy) { ... }: the name is a C++ identifier that says the behaviour.
#define TEST_CASE(name)                                                                      \
    static void name();                                                                      \
    static const ::check::Registration CHECK_CASE_CONCAT(name, _registration)(#name, &name); \
    static void name()

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) check::report(__FILE__, __LINE__, "CHECK(" #cond ")"); \
    } while (0)
#define CHECK_EQ(a, b) check::equal((a), (b), #a, #b, __FILE__, __LINE__)
