// Helpers for the multi-process tests: the mpirun command line that works on one machine without a
// network (loopback TCP only, no binding, oversubscription allowed, --allow-run-as-root only as
// root), running a shell command with a time limit, and reading metrics_file JSON lines.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/process_util.h"

namespace tessera::testing {

// mpirun with the options every test needs; `np` ranks on this host.
inline std::string mpirun(int np) {
  std::string s = "mpirun -np " + std::to_string(np) +
                  " --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo"
                  " --mca oob_tcp_if_include lo --mca plm_rsh_agent false -x OMP_NUM_THREADS=1";
  if (geteuid() == 0) s += " --allow-run-as-root";
  return s;
}

inline bool have_mpirun() {
  return std::system("command -v mpirun > /dev/null 2>&1") == 0;
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

// A fresh folder under the system's temporary folder, removed at destruction.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    std::string templ = (std::filesystem::temp_directory_path() / ("tessera-" + tag + "-XXXXXX")).string();
    path = mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// metrics_file lines: step -> {tag -> value}.
inline std::map<int64_t, std::map<std::string, double>> read_metrics(const std::filesystem::path& file) {
  std::map<int64_t, std::map<std::string, double>> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line);
    const int64_t step = j.at("step").get<int64_t>();
    for (auto& [k, v] : j.items())
      if (v.is_number()) out[step][k] = v.get<double>();
  }
  return out;
}

}  // namespace tessera::testing
