// The target catalogue (configs/targets.yml) and the topology names it resolves.
#include "tessera/compile/target.h"

#include <gtest/gtest.h>

#include "tessera/core/error.h"

namespace tessera::compile {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

const Catalogue& catalogue() {
  static const Catalogue c = load_catalogue(default_catalogue_path());
  return c;
}

// A fixed machine, so that the cpu names resolve without measuring.
CpuMachine fake_cpu() {
  return CpuMachine{.cores = 4,
                    .f32_flops = 400e9,
                    .bf16_flops = 800e9,
                    .gemm_f32_flops = 300e9,
                    .memory_bytes = 64 * kGiB,
                    .bandwidth_bytes_per_s = 40e9};
}

TEST(Catalogue, ParsesEveryTargetTheIssueNames) {
  for (const char* name :
       {"a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb", "b200", "v4", "v5e", "v5p", "v6e", "cpu"})
    EXPECT_NE(catalogue().find(name), nullptr) << name;
  const Target& h100 = *catalogue().find("h100-80gb");
  EXPECT_EQ(h100.kind, TargetKind::kGpu);
  EXPECT_EQ(h100.devices_per_node, 8);
  EXPECT_NEAR(h100.peak_bf16_flops, 989e12, 1e9);
  EXPECT_NEAR(h100.memory_bytes / kGiB, 79.6, 1e-9);
  EXPECT_GT(h100.hbm_bytes_per_s, h100.intra_node_bytes_per_s);
  EXPECT_GT(h100.intra_node_bytes_per_s, h100.inter_node_bytes_per_s);
  EXPECT_EQ(catalogue().find("v5e")->memory_bytes, 16 * kGiB);
}

TEST(Catalogue, GpuNamesAreOneNodeOrNDevices) {
  Topology node = resolve_topology(catalogue(), "h100-80gb", 4, nullptr);
  EXPECT_EQ(node.devices_per_slice, 8);
  EXPECT_EQ(node.num_devices(), 32);
  Topology one = resolve_topology(catalogue(), "h100-80gb-1", -1, nullptr);
  EXPECT_EQ(one.num_devices(), 1);
  EXPECT_EQ(resolve_topology(catalogue(), "b200-16", 1, nullptr).devices_per_slice, 16);
}

TEST(Catalogue, TpuNamesAreMaxTextSlices) {
  EXPECT_EQ(resolve_topology(catalogue(), "v5e-256", 2, nullptr).num_devices(), 512);
  EXPECT_EQ(resolve_topology(catalogue(), "v6e-4", 1, nullptr).num_devices(), 4);
  // v4 and v5p names count TensorCores, two per chip.
  EXPECT_EQ(resolve_topology(catalogue(), "v4-128", 1, nullptr).num_devices(), 64);
  EXPECT_EQ(resolve_topology(catalogue(), "v5p-128", 1, nullptr).num_devices(), 64);
  try {
    resolve_topology(catalogue(), "v5e-3", 1, nullptr);
    FAIL() << "v5e-3 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("v5e-{1,4,8,16,32,64,128,256}"), std::string::npos) << e.what();
  }
}

TEST(Catalogue, CpuNamesScaleThisMachine) {
  const CpuMachine m = fake_cpu();
  Topology one = resolve_topology(catalogue(), "cpu-2", 1, &m);
  EXPECT_EQ(one.num_devices(), 1);
  EXPECT_DOUBLE_EQ(one.device.peak_f32_flops, 200e9);  // 2 of 4 cores
  EXPECT_DOUBLE_EQ(one.device.gemm_efficiency, 0.75);
  EXPECT_DOUBLE_EQ(one.device.memory_bytes, 64 * kGiB);
  Topology two = resolve_topology(catalogue(), "cpu-1x2", 1, &m);
  EXPECT_EQ(two.num_devices(), 2);
  EXPECT_DOUBLE_EQ(two.device.peak_f32_flops, 100e9);
  EXPECT_DOUBLE_EQ(two.device.memory_bytes, 32 * kGiB);  // the ranks share the machine
  // More cores than the machine's 4: 8 ranks of 1 core each compute at half a core's peak.
  Topology over = resolve_topology(catalogue(), "cpu-1x8", 1, &m);
  EXPECT_EQ(over.num_devices(), 8);
  EXPECT_DOUBLE_EQ(over.device.peak_f32_flops, 50e9);
}

TEST(Catalogue, UnknownNamesListTheKnownOnes) {
  try {
    resolve_topology(catalogue(), "h800-80gb", 1, nullptr);
    FAIL() << "h800-80gb accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(m.find("compile_topology"), std::string::npos) << m;
    for (const char* known : {"a100-40gb", "h100-80gb", "h200-141gb", "b200", "v5e-{", "v6e-{", "cpu-<C>"})
      EXPECT_NE(m.find(known), std::string::npos) << known << " missing from: " << m;
  }
}

TEST(Catalogue, MalformedEntriesNameTheField) {
  try {
    parse_catalogue("targets:\n  - name: x\n    kind: gpu\n    memory_gib: 8\n", "test.yml");
    FAIL() << "an entry without peaks accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.yml: target 'x': the field 'peak_bf16_tflops' is missing"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::compile
