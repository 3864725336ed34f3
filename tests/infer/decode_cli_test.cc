// `tessera decode` end to end with the real program: a checkpoint made by `tessera train`
// (llama-test, 2 steps on synthetic data) completes a replicated prompt and a prompts_file through
// fewer slots than prompts; sampled completions are the same run to run and for any number of
// slots; hand-made parameter files make the model say EOS at once (stop: eos) or one token forever
// (stop: length); and the errors a user meets come with exit code 2 (config) or 1 (file) and a
// message naming the key. The tokenizer is the byte-level BPE fixture of tests/data.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tessera/config/config.h"
#include "tessera/core/safetensors.h"
#include "tessera/core/source_dir.h"
#include "tessera/data/tokenizer.h"
#include "tessera/infer/engine.h"
#include "tessera/train/trainer.h"
#include "testing/process_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = tessera::source_dir();
const fs::path kTokenizer = kSource / "tests" / "data" / "fixtures" / "tiny_bpe";

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

struct Result {
  int code = -1;
  std::string out, err;
};

class DecodeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::is_regular_file(testing::tessera_binary())) return;
    dir_ = fs::temp_directory_path() / ("tessera_decode_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    trained_ = run({"train", (kSource / "configs" / "base.yml").string(), "run_name=tiny",
                    "base_output_directory=" + dir_.string(), "model_name=llama-test", "steps=2",
                    "per_device_batch_size=2", "max_target_length=32", "device_peak_tflops=1",
                    "enable_tensorboard=false", "num_threads=1"});
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!fs::is_regular_file(testing::tessera_binary())) {
      if (std::getenv("TESSERA_BINARY"))
        FAIL() << "TESSERA_BINARY=" << testing::tessera_binary() << " is not a file";
      GTEST_SKIP() << "no tessera binary at " << testing::tessera_binary();
    }
    ASSERT_EQ(trained_.code, 0) << trained_.out << trained_.err;
  }

  static Result run(const std::vector<std::string>& args) {
    std::string cmd = testing::shell_quote(testing::tessera_binary().string());
    for (const std::string& a : args) cmd.append(" ").append(testing::shell_quote(a));
    cmd.append(" >").append(testing::shell_quote((dir_ / "out").string()));
    cmd.append(" 2>").append(testing::shell_quote((dir_ / "err").string()));
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_all(dir_ / "out");
    r.err = read_all(dir_ / "err");
    return r;
  }

  // `tessera decode` on llama-test with the fixture tokenizer and `extra` settings.
  static Result decode(const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"decode",
                                  (kSource / "configs" / "base.yml").string(),
                                  "model_name=llama-test",
                                  "tokenizer_type=huggingface",
                                  "tokenizer_path=" + kTokenizer.string(),
                                  "max_target_length=24",
                                  "max_prefill_predict_length=8",
                                  "num_threads=1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  }
  // A parameter file of `model` (with `overrides`) of uniform random values in [-0.1, 0.1] (norm
  // scales 1): enough to decode something other than one token.
  static std::string random_parameters(const std::string& model, const std::vector<std::string>& overrides) {
    std::vector<std::string> o = {"model_name=" + model, "per_device_batch_size=1",
                                  "override_model_config=true"};
    o.insert(o.end(), overrides.begin(), overrides.end());
    const models::ModelSpec spec =
        models::model_spec_from_config(load_config(kSource / "configs" / "base.yml", o));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    std::vector<std::vector<float>> data;
    std::vector<NamedTensor> tensors;
    for (const auto& [name, shape] : infer::parameter_shapes(spec)) {
      std::vector<float>& d = data.emplace_back(static_cast<size_t>(shape.numel()));
      for (float& v : d) v = name.ends_with(".scale") ? 1.0f : u(rng);
      tensors.push_back({name, Tensor(d.data(), shape, DType::kF32)});
    }
    const std::string path = (dir_ / (model + ".safetensors")).string();
    write_safetensors(path, tensors);
    return path;
  }
  static std::string checkpoint() { return (dir_ / "tiny" / "checkpoints" / "2").string(); }

  // A parameter file for llama-test whose decoder passes the embedding through unchanged (every
  // layer weight zero), whose embedding rows are all ones, and whose unembedding has ones in the
  // column of `token` only: every step's logits are 64 (the width) for `token` and 0 elsewhere.
  static std::string always(int32_t token) {
    const std::vector<std::string> overrides = {"model_name=llama-test", "per_device_batch_size=1"};
    Config cfg = load_config(kSource / "configs" / "base.yml", overrides);
    const models::ModelSpec spec = models::model_spec_from_config(cfg);
    std::vector<std::vector<float>> data;
    std::vector<NamedTensor> tensors;
    for (const auto& [name, shape] : infer::parameter_shapes(spec)) {
      std::vector<float>& d = data.emplace_back(static_cast<size_t>(shape.numel()), 0.0f);
      if (name == "token_embedder.embedding" || name.ends_with(".scale")) std::fill(d.begin(), d.end(), 1.0f);
      if (name == "decoder.logits_dense.kernel")  // [E, V]
        for (int64_t e = 0; e < shape[0]; ++e) d[static_cast<size_t>(e * shape[1] + token)] = 1.0f;
      tensors.push_back({name, Tensor(d.data(), shape, DType::kF32)});
    }
    const std::string path = (dir_ / ("always_" + std::to_string(token) + ".safetensors")).string();
    write_safetensors(path, tensors);
    return path;
  }

  static inline fs::path dir_;
  static inline Result trained_;
};

TEST_F(DecodeCli, ReplicatesThePromptOverTheBatch) {
  const Result r =
      decode({"load_parameters_path=" + checkpoint(), "per_device_batch_size=3", "prompt=hello world"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count(r.out, "Input `hello world` -> `"), 3u) << r.out;
  // Greedy: the three copies are the same text.
  std::istringstream lines(r.out);
  std::string a, b, c;
  std::getline(lines, a), std::getline(lines, b), std::getline(lines, c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  for (const char* want :
       {"prompt 0: 4 tokens", "stop: ", "prefill: 3 prompts", "tokens/s); decode: ", "3 slots"})
    EXPECT_NE(r.err.find(want), std::string::npos) << want << " in\n" << r.err;
}

// The MoE families decode through the graph engine (the model definition's own graph): three
// copies of a prompt in three slots (a 4-row step with one padding row) give the same greedy text.
TEST_F(DecodeCli, MixtureOfExpertsFamiliesDecodeThroughTheGraphEngine) {
  const std::vector<std::string> vocab = {"vocab_size=512"};  // the fixture tokenizer's ids fit
  for (const auto& [model, overrides] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"mixtral-test", vocab},
           {"gpt-oss-tiny",
            {"vocab_size=512", "base_emb_dim=64", "head_dim=16", "base_moe_mlp_dim=32", "num_experts=4",
             "sliding_window_size=4"}}}) {
    SCOPED_TRACE(model);
    std::vector<std::string> a = {"decode",
                                  (kSource / "configs" / "base.yml").string(),
                                  "model_name=" + model,
                                  "override_model_config=true",
                                  "tokenizer_type=huggingface",
                                  "tokenizer_path=" + kTokenizer.string(),
                                  "max_target_length=24",
                                  "max_prefill_predict_length=8",
                                  "num_threads=1",
                                  "per_device_batch_size=3",
                                  "prompt=hello world",
                                  "load_parameters_path=" + random_parameters(model, overrides)};
    a.insert(a.end(), overrides.begin(), overrides.end());
    const Result r = run(a);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(count(r.out, "Input `hello world` -> `"), 3u) << r.out;
    std::istringstream lines(r.out);
    std::string x, y, z;
    std::getline(lines, x), std::getline(lines, y), std::getline(lines, z);
    EXPECT_EQ(x, y);
    EXPECT_EQ(x, z);
    EXPECT_NE(r.err.find("graph engine, 3 slots"), std::string::npos) << r.err;
  }
}

TEST_F(DecodeCli, PromptsFileThroughFewerSlotsIsReproducible) {
  const fs::path prompts = dir_ / "prompts.txt";
  std::ofstream(prompts) << "hello\nheld world\n\nit's 12\n";
  auto sampled = [&](int slots, const std::string& seed) {
    return decode({"load_parameters_path=" + checkpoint() + "/params.safetensors",
                   "prompts_file=" + prompts.string(), "per_device_batch_size=" + std::to_string(slots),
                   "decode_sampling_strategy=weighted", "decode_sampling_temperature=1.5",
                   "decode_sampling_seed=" + seed});
  };
  const Result two = sampled(2, "7");
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(count(two.out, "Input `"), 3u) << two.out;
  const size_t p0 = two.out.find("Input `hello` -> `"), p1 = two.out.find("Input `held world` -> `"),
               p2 = two.out.find("Input `it's 12` -> `");
  EXPECT_TRUE(p0 < p1 && p1 < p2) << "completions come in the order of the prompts:\n" << two.out;
  EXPECT_NE(two.err.find("2 slots"), std::string::npos) << two.err;
  // Each prompt draws from its own stream: the batch does not change the text, the seed does.
  EXPECT_EQ(sampled(2, "7").out, two.out);
  EXPECT_EQ(sampled(1, "7").out, two.out);
  EXPECT_NE(sampled(2, "8").out, two.out);
}

TEST_F(DecodeCli, StopsAtEosOrAtTheLength) {
  auto tok = data::load_tokenizer("huggingface", kTokenizer);
  ASSERT_GE(tok->eos_id(), 0) << "the fixture tokenizer has an EOS token";
  Result r =
      decode({"load_parameters_path=" + always(tok->eos_id()), "per_device_batch_size=1", "prompt=hello"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Input `hello` -> ``\n");
  EXPECT_NE(r.err.find("prompt 0: 2 tokens, 0 generated, stop: eos"), std::string::npos) << r.err;

  r = decode({"load_parameters_path=" + always('a'), "per_device_batch_size=1", "prompt=hello",
              "decode_sampling_strategy=nucleus", "decode_sampling_nucleus_p=0.9"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "Input `hello` -> `" + std::string(22, 'a') + "`\n");  // 2 prompt tokens + 22 = 24
  EXPECT_NE(r.err.find("prompt 0: 2 tokens, 22 generated, stop: length"), std::string::npos) << r.err;
}

TEST_F(DecodeCli, ErrorsNameTheKey) {
  Result r = decode({"per_device_batch_size=1", "prompt=hello"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("load_parameters_path"), std::string::npos) << r.err;

  r = decode({"load_parameters_path=" + checkpoint(), "per_device_batch_size=1",
              "prompt=hello world hello world hello world"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("max_prefill_predict_length=8"), std::string::npos) << r.err;

  r = decode({"load_parameters_path=" + checkpoint(), "per_device_batch_size=1",
              "decode_sampling_strategy=nucleus"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("decode_sampling_nucleus_p"), std::string::npos) << r.err;

  r = decode(
      {"load_parameters_path=" + checkpoint(), "per_device_batch_size=1", "decode_sampling_strategy=topk"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("decode_sampling_top_k"), std::string::npos) << r.err;

  r = decode({"load_full_state_path=" + checkpoint(), "per_device_batch_size=1", "prompt=hello"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("load_parameters_path=" + checkpoint()), std::string::npos) << r.err;

  r = decode({"load_parameters_path=" + (dir_ / "nothing_here").string(), "per_device_batch_size=1",
              "prompt=hello"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("nothing_here"), std::string::npos) << r.err;

  r = decode({"load_parameters_path=" + checkpoint(), "per_device_batch_size=1", "prompt=hello",
              "override_model_config=true", "base_emb_dim=32"});
  EXPECT_EQ(r.code, 2);  // a checkpoint of another model size
  EXPECT_NE(r.err.find("another model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
