// The whole-model tools on a checkpoint written by several ranks: `mpirun -np 2 tessera train`
// with FSDP writes per-rank piece files; checkpoint::WholeParameters puts them together, so
// `tessera decode` (greedy) prints the same completion as from the one-process run's checkpoint of
// the same training, and `tessera convert --to hf` writes the same weights. Training itself is
// compared rank against rank in parallel_train_test.cc; here the two checkpoints hold parameters
// equal within that test's tolerance, so the greedy text of a few tokens and the float32 tensors
// are compared with that tolerance in mind: the completion must be equal, and each converted
// tensor within 6e-3 absolute (the worst-case AdamW bound stated there).
#include <gtest/gtest.h>

#include <cmath>

#include "dist_test_util.h"
#include "tessera/checkpoint/checkpoint.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

std::string q(const std::string& s) {
  return testing::shell_quote(s);
}

CommandResult train(int np, const fs::path& out, const std::string& run) {
  const std::string args =
      " model_name=llama-test dtype=float32 max_target_length=16 steps=2 "
      "learning_rate=1e-3 warmup_steps_fraction=0 num_threads=1 device_peak_tflops=1 "
      "enable_tensorboard=false async_checkpointing=false checkpoint_period=100 "
      "per_device_batch_size=" +
      std::to_string(4 / np) + " run_name=" + run + " base_output_directory=" + q(out.string());
  const std::string launch = np == 1 ? "" : testing::mpirun(np) + " ";
  return testing::run_command(launch + q(testing::tessera_binary().string()) + " train " +
                                  q(tessera::source_dir().string() + "/configs/base.yml") + args,
                              120);
}

std::string decode_text(const fs::path& ckpt) {
  const std::string tok = tessera::source_dir().string() + "/tests/data/fixtures/tiny_bpe/tiny.tiktoken";
  CommandResult r = testing::run_command(
      q(testing::tessera_binary().string()) + " decode " +
          q(tessera::source_dir().string() + "/configs/base.yml") +
          " model_name=llama-test dtype=float32 max_target_length=16 max_prefill_predict_length=8 "
          "per_device_batch_size=1 num_threads=1 tokenizer_type=tiktoken tokenizer_path=" +
          q(tok) + " prompt=hello load_parameters_path=" + q(ckpt.string()) + " 2>/dev/null",
      60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(ShardedCheckpointTools, DecodeAndConvertReadTheRanksPieces) {
  if (!testing::have_mpirun()) GTEST_SKIP() << "mpirun is not installed";
  testing::TempDir dir("sharded-tools");
  ASSERT_EQ(train(1, dir.path, "one").exit_code, 0);
  CommandResult two = train(2, dir.path, "fsdp");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const fs::path one_ckpt = dir.path / "one" / "checkpoints" / "2";
  const fs::path fsdp_ckpt = dir.path / "fsdp" / "checkpoints" / "2";
  ASSERT_FALSE(fs::exists(fsdp_ckpt / checkpoint::kParamsFile)) << "expected per-rank piece files";

  // The pieces put together have every parameter at its whole shape and the one-process values.
  checkpoint::WholeParameters whole(fsdp_ckpt), ref(one_ckpt);
  ASSERT_EQ(whole.names(), ref.names());
  for (const std::string& n : ref.names()) {
    const Tensor a = whole.get(n), b = ref.get(n);
    ASSERT_EQ(a.shape(), b.shape()) << n;
    double worst = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(a.ptr<float>()[i] - b.ptr<float>()[i])));
    EXPECT_LE(worst, 6e-3) << n;
  }

  const std::string text = decode_text(fsdp_ckpt);
  EXPECT_NE(text.find("Input `hello`"), std::string::npos) << text;
  EXPECT_EQ(text, decode_text(one_ckpt));

  CommandResult conv =
      testing::run_command(q(testing::tessera_binary().string()) + " convert --from tessera --to hf " +
                               q(fsdp_ckpt.string()) + " " + q((dir.path / "hf").string()),
                           60);
  ASSERT_EQ(conv.exit_code, 0) << conv.output;
  SafetensorsFile hf((dir.path / "hf" / "model.safetensors").string());
  EXPECT_TRUE(hf.contains("model.embed_tokens.weight"));
}

}  // namespace
}  // namespace tessera
