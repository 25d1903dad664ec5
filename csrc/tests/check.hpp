// Minimal test harness for the native unit tests: CHECK records a failure and continues;
// the test executable's exit status is the number of failures (ctest reads it).
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

namespace check {
inline int& failures() {
    static int n = 0;
    return n;
}
template <typename A, typename B>
void equal(const A& a, const B& b, const char* expr_a, const char* expr_b, const char* file, int line) {
    if (!(a == b)) {
        std::ostringstream msg;
        msg << file << ":" << line << ": CHECK_EQ(" << expr_a << ", " << expr_b << ") failed";
        std::fprintf(stderr, "%s\n", msg.str().c_str());
        ++failures();
    }
}
inline int finish(const char* name) {
    if (failures() == 0) std::printf("%s: all checks passed\n", name);
    else std::printf("%s: %d checks failed\n", name, failures());
    return failures() == 0 ? 0 : 1;
}
}  // namespace check

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            ++check::failures();                                                    \
        }                                                                           \
    } while (0)
#define CHECK_EQ(a, b) check::equal((a), (b), #a, #b, __FILE__, __LINE__)
