// Helpers for tests that run programs: where the built `tessera` is, shell quoting, a child process
// whose stdout and stderr come through one pipe, read line by line, a shell command with a time
// limit, and the Python that test-only tools run under.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace tessera::testing {

// The program under test: $TESSERA_BINARY (CMake sets it), else `tessera` beside the test binary.
inline std::filesystem::path tessera_binary() {
  if (const char* env = std::getenv("TESSERA_BINARY"); env && *env) return env;
  return std::filesystem::read_symlink("/proc/self/exe").parent_path() / "tessera";
}

// `s` as one single-quoted word for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Each of `words` quoted (shell_quote), each after one space: " 'a' 'b'"; empty for none. Appends
// in place (GCC 12 reports a false -Wrestrict for `" " + std::string` at -O3).
inline std::string shell_words(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    out += ' ';
    out += shell_quote(w);
  }
  return out;
}

// A running `tessera` whose stdout and stderr come through one pipe.
struct Child {
  pid_t pid = -1;
  int out = -1;
};

// Starts `tessera args...`.
inline Child spawn(const std::vector<std::string>& args) {
  // Everything that allocates happens before fork: the child of a threaded process may only make
  // async-signal-safe calls before exec.
  const std::string bin = tessera_binary().string();
  std::vector<std::string> all = {bin};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  return {pid, fds[0]};
}

// Reads the child's output until a line satisfies `stop` (returns true) or the pipe closes
// (returns false). `text` collects everything read.
inline bool read_until(int fd, const std::function<bool(const std::string&)>& stop, std::string& text) {
  std::string line;
  char c;
  for (;;) {
    const ssize_t r = read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    text.push_back(c);
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    if (stop(line)) return true;
    line.clear();
  }
}

// Waits for `pid`; its exit status, or 128 + the signal that ended it.
inline int wait_exit_code(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct CommandResult {
  int exit_code = -1;  // the shell's exit status (124: timed out)
  std::string output;  // stdout and stderr
};

// Runs `cmd` through /bin/sh with a time limit (coreutils timeout, SIGKILL after it).
inline CommandResult run_command(const std::string& cmd, int timeout_s = 60) {
  const std::string full =
      "timeout -s KILL " + std::to_string(timeout_s) + " /bin/sh -c " + shell_quote(cmd) + " 2>&1";
  CommandResult r;
  FILE* p = popen(full.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t n; (n = fread(buf.data(), 1, buf.size(), p)) > 0;) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r.exit_code == 137) r.exit_code = 124;  // timeout's SIGKILL
  return r;
}

// The Python of the test-only tools (tensorboard, openai, torch): $TESSERA_PYTHON (scripts/test.sh
// points it at .venv-test), else python3.
inline std::string test_python() {
  if (const char* env = std::getenv("TESSERA_PYTHON"); env && *env) return env;
  return "python3";
}

// Whether test_python() can `import modules` ("torch, transformers").
inline bool python_imports(const std::string& modules) {
  return std::system(
             (shell_quote(test_python()) + " -c " + shell_quote("import " + modules) + " >/dev/null 2>&1")
                 .c_str()) == 0;
}

}  // namespace tessera::testing
