// prepare-data (prepare.h).
#include "tessera/data/prepare.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file.h"
#include "tessera/data/documents.h"
#include "tessera/data/shard.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kProgressBytes = uint64_t{1} << 20;

std::string shard_name(const std::string& prefix, size_t index) {
  return fmt::format("{}-{:05d}{}", prefix, index, kShardExtension);
}

// Removes <prefix>-NNNNN.tokens files numbered `keep` and above, left by an earlier, larger run.
void remove_stale_shards(const fs::path& dir, const std::string& prefix, size_t keep) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const std::string head = prefix + "-";
    if (name.size() != head.size() + 5 + kShardExtension.size() || name.rfind(head, 0) != 0 ||
        !name.ends_with(kShardExtension))
      continue;
    const std::string digits = name.substr(head.size(), 5);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::stoul(digits) >= keep) fs::remove(e.path(), ec);
  }
}

}  // namespace

PrepareReport prepare_data(const PrepareDataOptions& o, const Tokenizer& tokenizer,
                           const std::function<void(const PrepareProgress&)>& progress) {
  TESSERA_CHECK(o.tokens_per_shard >= 1, ErrorKind::kConfig, "tokens_per_shard={}: expected >= 1",
                o.tokens_per_shard);
  TESSERA_CHECK(!o.out_dir.empty(), ErrorKind::kConfig, "prepare-data needs an output folder");
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<fs::path> files = resolve_text_files(o.inputs);
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) fail(ErrorKind::kIo, "cannot create the folder '{}': {}", o.out_dir.string(), ec.message());

  const TokenSpace space{tokenizer.vocab_size(), tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.pad_id()};
  DocumentReader reader(files);
  PrepareReport report;
  nlohmann::json shard_list = nlohmann::json::array();
  std::unique_ptr<ShardWriter> writer;
  auto close_shard = [&] {
    writer->finish();
    shard_list.push_back({{"file", report.shards.back().filename().string()},
                          {"tokens", writer->token_count()},
                          {"documents", writer->document_count()}});
    writer.reset();
  };
  PrepareProgress p;
  p.bytes_total = reader.bytes_total();
  uint64_t last_report = 0;
  std::string text;
  while (reader.next(text)) {
    const std::vector<int32_t> ids = tokenizer.encode(text);
    if (!writer) {
      report.shards.push_back(o.out_dir / shard_name(o.shard_prefix, report.shards.size()));
      writer = std::make_unique<ShardWriter>(report.shards.back(), space);
    }
    writer->add_document(ids);
    report.documents += 1;
    report.tokens += static_cast<int64_t>(ids.size());
    if (writer->token_count() >= static_cast<uint64_t>(o.tokens_per_shard)) close_shard();
    if (progress && reader.bytes_read() - last_report >= kProgressBytes) {
      last_report = reader.bytes_read();
      p.bytes_read = reader.bytes_read();
      p.documents = report.documents;
      p.tokens = report.tokens;
      p.shards = static_cast<int64_t>(report.shards.size());
      p.current_file = reader.current_file().string();
      progress(p);
    }
  }
  if (writer) close_shard();
  report.bytes = reader.bytes_total();

  nlohmann::json manifest = {
      {"format", "tessera token shards"},
      {"version", kShardVersion},
      {"tokenizer",
       {{"type", std::string(tokenizer.type())},
        {"vocab_size", space.vocab_size},
        {"bos_id", space.bos_id},
        {"eos_id", space.eos_id},
        {"pad_id", space.pad_id}}},
      {"inputs", nlohmann::json::array()},
      {"documents", report.documents},
      {"tokens", report.tokens},
      {"shards", shard_list},
  };
  for (const fs::path& f : files) manifest["inputs"].push_back(f.string());
  write_file_atomically(o.out_dir / "manifest.json", manifest.dump(2) + "\n");
  remove_stale_shards(o.out_dir, o.shard_prefix, report.shards.size());

  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress) {
    p.bytes_read = p.bytes_total;
    p.documents = report.documents;
    p.tokens = report.tokens;
    p.shards = static_cast<int64_t>(report.shards.size());
    p.current_file.clear();
    progress(p);
  }
  return report;
}

}  // namespace tessera::data
