// Test helpers shared by the coordination and binding tests: real processes, files, index lists.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace fixtures {

// "0", "1", ..., "n-1".
inline std::vector<std::string> gpus(int n) {
    std::vector<std::string> v;
    for (int i = 0; i < n; ++i) v.push_back(std::to_string(i));
    return v;
}

// "a,b,c".
inline std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
}

inline std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A directory of its own for one test executable (mkdtemp), removed with what is in it at the end:
// `const ScratchDir dir("/tmp/name-XXXXXX");` in main, around check::run. path() is empty when it could
// not be made.
class ScratchDir {
public:
    explicit ScratchDir(std::string pattern) : path_(std::move(pattern)) {
        if (mkdtemp(path_.data()) == nullptr) path_.clear();
    }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    ~ScratchDir() {
        if (!path_.empty() && std::system(("rm -rf '" + path_ + "'").c_str()) != 0) {
            std::fprintf(stderr, "could not remove %s\n", path_.c_str());
        }
    }
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// The token of the lease file beside the coordination file `path` (empty when it has none).
inline std::string lease_token(const std::string& path) {
    const std::string text = read_text(path + ".lease");
    return text.size() > 17 && text[16] == ' ' ? text.substr(0, 16) : std::string();  // "<token> <inode>\n"
}

// A live process to hold GPUs: a child that sleeps until killed.
inline pid_t spawn_sleeper() {
    const pid_t pid = fork();
    if (pid == 0) {
        for (;;) pause();
    }
    return pid;
}

inline void kill_and_reap(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
}

// Lets the file at `path` grow no further in this process (RLIMIT_FSIZE; with SIGXFSZ ignored a write
// beyond it fails with EFBIG): a failing write, for the paths that must undo what they took for it.
inline bool limit_growth_to(const std::string& path) {
    struct stat st{};
    struct rlimit limit{};
    if (stat(path.c_str(), &st) != 0 || getrlimit(RLIMIT_FSIZE, &limit) != 0) return false;
    limit.rlim_cur = static_cast<rlim_t>(st.st_size);
    return setrlimit(RLIMIT_FSIZE, &limit) == 0;
}

inline bool lift_growth_limit() {
    struct rlimit limit{};
    if (getrlimit(RLIMIT_FSIZE, &limit) != 0) return false;
    limit.rlim_cur = limit.rlim_max;
    return setrlimit(RLIMIT_FSIZE, &limit) == 0;
}

}  // namespace fixtures
