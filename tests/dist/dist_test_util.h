// Helpers for the multi-process tests: the mpirun command line that works on one machine without a
// network (loopback TCP only, no binding, oversubscription allowed, --allow-run-as-root only as
// root), a temporary folder, and reading metrics_file JSON lines (run_command is in
// testing/process_util.h).
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
