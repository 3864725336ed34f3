// Helpers for the multi-process tests: the mpirun command line that works on one machine without a
// network (loopback TCP only, no binding, oversubscription allowed, --allow-run-as-root only as
// root), a temporary folder, reading metrics_file JSON lines, and a child process whose output is
// read as it comes (kill tests) (run_command is in
// testing/process_util.h).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/safetensors.h"
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

// /bin/sh -c "exec CMD" with stdout and stderr on a non-blocking pipe: the child is mpirun itself.
struct PipedChild {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  bool read_some() {  // false at end of output
    char buf[4096];
    for (;;) {
      const ssize_t n = read(out, buf, sizeof buf);
      if (n > 0) {
        text.append(buf, static_cast<size_t>(n));
        continue;
      }
      return !(n == 0);
    }
  }
};

inline PipedChild spawn_piped(const std::string& cmd) {
  const std::string full = "exec " + cmd;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return {pid, fds[0], ""};
}

// The processes whose parent is `parent` and whose name is `name` (from /proc/<pid>/stat).
inline std::vector<pid_t> children_named(pid_t parent, const std::string& name) {
  std::vector<pid_t> out;
  for (const std::filesystem::directory_entry& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "stat");
    std::string line;
    if (!std::getline(f, line)) continue;
    const size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent && line.substr(open + 1, close - open - 1) == name) out.push_back(std::stoi(pid));
  }
  return out;
}

// Every parameter of the checkpoint folder, put together from its params*.safetensors pieces
// (metadata "piece:<name>" = "offset=a,b whole=c,d"); each must be covered exactly once.
inline std::map<std::string, std::vector<double>> checkpoint_params(const std::filesystem::path& folder) {
  auto ints = [](const std::string& s) {
    std::vector<int64_t> out;
    for (size_t pos = 0; pos < s.size();) {
      size_t end = s.find(',', pos);
      if (end == std::string::npos) end = s.size();
      out.push_back(std::stoll(s.substr(pos, end - pos)));
      pos = end + 1;
    }
    return out;
  };
  // Writes the f32 piece `t` at `offset` into the row-major whole tensor of shape `whole`.
  auto place = [](const Tensor& t, const std::vector<int64_t>& offset, const std::vector<int64_t>& whole,
                  std::vector<double>& out) {
    int64_t n = 1;
    for (int64_t w : whole) n *= w;
    if (out.empty()) out.assign(static_cast<size_t>(n), NAN);
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t rest = i, gi = 0, stride = 1;
      std::vector<int64_t> idx(whole.size());
      for (int d = t.rank() - 1; d >= 0; --d) {
        idx[d] = rest % t.dim(d) + offset[d];
        rest /= t.dim(d);
      }
      for (int d = t.rank() - 1; d >= 0; --d) {
        gi += idx[d] * stride;
        stride *= whole[d];
      }
      out[static_cast<size_t>(gi)] = t.ptr<float>()[i];
    }
  };
  std::map<std::string, std::vector<double>> out;
  std::map<std::string, int64_t> filled;
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    const std::string file = e.path().filename().string();
    if (!file.starts_with("params") || !file.ends_with(".safetensors")) continue;
    SafetensorsFile f(e.path().string());
    for (const std::string& name : f.names()) {
      const Tensor t = f.get(name);
      std::vector<int64_t> offset(static_cast<size_t>(t.rank()), 0), whole;
      for (int d = 0; d < t.rank(); ++d) whole.push_back(t.dim(d));
      if (auto it = f.metadata().find("piece:" + name); it != f.metadata().end()) {
        const std::string& m = it->second;
        const size_t w = m.find(" whole=");
        offset = ints(m.substr(7, w - 7));
        whole = ints(m.substr(w + 7));
      }
      place(t, offset, whole, out[name]);
      filled[name] += t.numel();
    }
  }
  for (auto& [name, v] : out)
    EXPECT_EQ(filled[name], static_cast<int64_t>(v.size())) << name << " in " << folder;
  return out;
}

}  // namespace tessera::testing
