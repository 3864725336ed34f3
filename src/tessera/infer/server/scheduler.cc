// The continuous-batching loop (scheduler.h).
#include "tessera/infer/server/scheduler.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::infer::server {

// Prompt ids kept before the generated ones when turning ids into text: decoding a token alone
// can lose its leading space (SentencePiece drops the space that starts a text), so the newest
// text is always decoded after a few ids of context and only the difference is kept.
constexpr size_t kDetokenizeContext = 5;

struct Scheduler::Slot {
  Slot(GenerationRequest r, std::shared_ptr<RequestState> st)
      : request(std::move(r)), state(std::move(st)), sampler(request.seed) {}

  GenerationRequest request;
  std::shared_ptr<RequestState> state;
  Sampler sampler;
  int32_t next_token = 0;    // sampled, not yet fed to the engine
  int64_t completion = 0;    // tokens sampled so far, EOS included
  std::vector<int32_t> ids;  // a few prompt ids, then the generated ones
  size_t prefix_offset = 0;  // ids[prefix_offset, read_offset) decode to text already emitted
  size_t read_offset = 0;
  std::string held;      // text decoded but not yet delivered (it may begin a stop string)
  bool stopped = false;  // a stop string was found: nothing more is delivered
};

bool RequestState::wait(std::string& text, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return finished_ || !text_.empty(); });
  text += text_;
  text_.clear();
  return finished_;
}

FinishReason RequestState::finish_reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

std::string RequestState::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

int64_t RequestState::completion_tokens() const {
  std::lock_guard lock(mu_);
  return completion_tokens_;
}

void RequestState::push(std::string_view text) {
  if (text.empty()) return;
  {
    std::lock_guard lock(mu_);
    text_ += text;
  }
  cv_.notify_all();
}

void RequestState::finish(FinishReason reason, int64_t completion_tokens, std::string error) {
  {
    std::lock_guard lock(mu_);
    finished_ = true;
    reason_ = reason;
    completion_tokens_ = completion_tokens;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

bool ends_with_incomplete_utf8(std::string_view text) {
  if (text.ends_with("\xEF\xBF\xBD")) return true;
  // Walk back over continuation bytes (10xxxxxx) to the lead byte; its high bits say how long the
  // character is, and it is incomplete when fewer bytes follow.
  for (size_t back = 1; back <= 4 && back <= text.size(); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back;
  }
  return false;  // four continuation bytes: invalid, but nothing more will complete it
}

Scheduler::Scheduler(Engine& engine, const data::Tokenizer& tokenizer, SchedulerOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(options), vocab_(engine.vocab_size()) {
  sample_vocab_ = options_.sample_vocab > 0 ? std::min(options_.sample_vocab, vocab_) : vocab_;
  const int n = engine_.max_slots();
  TESSERA_CHECK(n >= 1, ErrorKind::kConfig, "the engine has {} slots; the server needs at least 1", n);
  slots_.resize(static_cast<size_t>(n));
  logits_.resize(static_cast<size_t>(n) * static_cast<size_t>(vocab_));
  batch_slots_.reserve(static_cast<size_t>(n));
  batch_tokens_.reserve(static_cast<size_t>(n));
}

Scheduler::~Scheduler() {
  stop();
}

std::shared_ptr<RequestState> Scheduler::submit(GenerationRequest request, std::string* refused) {
  const auto p = static_cast<int64_t>(request.prompt.size());
  TESSERA_CHECK_SHAPE(p >= 1 && p <= engine_.max_prefill_length(),
                      "server: a prompt of {} tokens; the engine takes 1 to {}", p,
                      engine_.max_prefill_length());
  TESSERA_CHECK_SHAPE(request.max_tokens >= 1 && p + request.max_tokens <= engine_.max_target_length(),
                      "server: {} prompt tokens + max_tokens {} exceed the context of {}", p,
                      request.max_tokens, engine_.max_target_length());
  for (const std::string& s : request.stop) TESSERA_CHECK_SHAPE(!s.empty(), "server: an empty stop string");
  auto state = std::make_shared<RequestState>(p);
  {
    std::lock_guard lock(mu_);
    const char* why = stopping_ ? "the server is shutting down"
                      : static_cast<int>(queue_.size()) >= options_.max_queued
                          ? "the server is busy: every slot is taken and the queue is full; try again later"
                          : nullptr;
    if (why) {
      if (refused) *refused = why;
      return nullptr;
    }
    queue_.emplace_back(std::move(request), state);
  }
  work_.notify_one();
  return state;
}

void Scheduler::start() {
  TESSERA_ASSERT(!thread_.joinable());
  thread_ = std::thread([this] { run(); });
}

void Scheduler::cancel_all() {
  cancel_all_ = true;
  work_.notify_one();
}

void Scheduler::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cancel_all();
  if (thread_.joinable()) thread_.join();
  // Without a thread (tests), settle whatever is left here.
  while (step()) {
  }
}

void Scheduler::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      work_.wait(lock, [&] { return stopping_ || cancel_all_ || !queue_.empty() || active_ > 0; });
      if (stopping_ && queue_.empty() && active_ == 0) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // Not expected (each request's failures are caught where they happen), but the thread must
      // not die with requests waiting on it: they end with the error.
      for (size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i]) end(static_cast<int>(i), FinishReason::kError, e.what());
    }
  }
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.requests_finished = requests_finished_;
  s.tokens_generated = tokens_generated_;
  s.decode_steps = decode_steps_;
  s.max_decode_batch = max_decode_batch_;
  s.active = active_;
  std::lock_guard lock(mu_);
  s.queued = static_cast<int64_t>(queue_.size());
  return s;
}

bool Scheduler::step() {
  if (cancel_all_.exchange(false)) {
    std::deque<std::pair<GenerationRequest, std::shared_ptr<RequestState>>> dropped;
    {
      std::lock_guard lock(mu_);
      dropped.swap(queue_);
    }
    for (auto& [request, state] : dropped) {
      state->finish(FinishReason::kCancelled, 0, "cancelled: the server is shutting down");
      ++requests_finished_;
    }
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i])
        end(static_cast<int>(i), FinishReason::kCancelled, "cancelled: the server is shutting down");
    return true;
  }
  const int64_t before = requests_finished_ + decode_steps_;
  admit();
  if (active_ > 0) decode_active();
  return requests_finished_ + decode_steps_ != before || active_ > 0;
}

void Scheduler::admit() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i]) continue;
    std::pair<GenerationRequest, std::shared_ptr<RequestState>> next;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    auto& [request, state] = next;
    if (state->cancelled()) {
      state->finish(FinishReason::kCancelled, 0, "cancelled");
      ++requests_finished_;
      --i;  // the slot is still free
      continue;
    }
    const int slot = static_cast<int>(i);
    auto s = std::make_unique<Slot>(std::move(request), std::move(state));
    const auto& prompt = s->request.prompt;
    const size_t context = std::min(kDetokenizeContext, prompt.size());
    s->ids.reserve(context + static_cast<size_t>(s->request.max_tokens));
    s->ids.assign(prompt.end() - static_cast<std::ptrdiff_t>(context), prompt.end());
    s->prefix_offset = s->read_offset = context;
    slots_[i] = std::move(s);
    ++active_;
    std::span<float> row(logits_.data(), static_cast<size_t>(vocab_));
    try {
      engine_.prefill(slot, slots_[i]->request.prompt, row);
    } catch (const std::exception& e) {
      end(slot, FinishReason::kError, e.what());
      continue;
    }
    sample_next(slot, row);
  }
}

void Scheduler::decode_active() {
  batch_slots_.clear();
  batch_tokens_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i]) continue;
    if (slots_[i]->state->cancelled()) {
      end(static_cast<int>(i), FinishReason::kCancelled, "cancelled: the client went away");
      continue;
    }
    batch_slots_.push_back(static_cast<int>(i));
    batch_tokens_.push_back(slots_[i]->next_token);
  }
  if (batch_slots_.empty()) return;
  const size_t n = batch_slots_.size();
  std::span<float> logits(logits_.data(), n * static_cast<size_t>(vocab_));
  try {
    engine_.decode(batch_slots_, batch_tokens_, logits);
  } catch (const std::exception& e) {
    for (int slot : batch_slots_) end(slot, FinishReason::kError, e.what());
    return;
  }
  ++decode_steps_;
  if (static_cast<int64_t>(n) > max_decode_batch_) max_decode_batch_ = static_cast<int64_t>(n);
  for (size_t b = 0; b < n; ++b)
    sample_next(batch_slots_[b],
                logits.subspan(b * static_cast<size_t>(vocab_), static_cast<size_t>(vocab_)));
}

void Scheduler::sample_next(int slot, std::span<const float> logits) {
  Slot& s = *slots_[static_cast<size_t>(slot)];
  try {
    on_token(slot, s.sampler.sample(logits.first(static_cast<size_t>(sample_vocab_)), s.request.sampling));
  } catch (const std::exception& e) {
    // Sampling or detokenizing failed for this request alone: it ends, the others go on.
    if (slots_[static_cast<size_t>(slot)]) end(slot, FinishReason::kError, e.what());
  }
}

bool Scheduler::on_token(int slot, int32_t token) {
  Slot& s = *slots_[static_cast<size_t>(slot)];
  ++s.completion;
  ++tokens_generated_;
  if (token == options_.eos_id) {
    end(slot, FinishReason::kStop);
    return false;
  }
  s.ids.push_back(token);
  // New text, once it does not end inside a character.
  if (std::string text = new_text(s, false); !text.empty() && emit(s, text, false)) {
    end(slot, FinishReason::kStop);
    return false;
  }
  if (s.completion >= s.request.max_tokens || engine_.length(slot) >= engine_.max_target_length()) {
    end(slot, FinishReason::kLength);
    return false;
  }
  s.next_token = token;
  return true;
}

std::string Scheduler::new_text(Slot& s, bool final) {
  // decode(ids[prefix_offset:]) minus decode(ids[prefix_offset:read_offset]): the text the newest
  // ids add, decoded with a few ids of context before them.
  const std::span<const int32_t> ids(s.ids);
  const std::string before = tokenizer_.decode(ids.subspan(s.prefix_offset, s.read_offset - s.prefix_offset));
  std::string now = tokenizer_.decode(ids.subspan(s.prefix_offset));
  if (now.size() <= before.size() || (!final && (!now.starts_with(before) || ends_with_incomplete_utf8(now))))
    return {};
  s.prefix_offset = s.read_offset;
  s.read_offset = s.ids.size();
  return now.substr(before.size());
}

bool Scheduler::emit(Slot& s, std::string_view text, bool final) {
  if (s.stopped) return true;
  s.held += text;
  size_t cut = std::string::npos;
  for (const std::string& stop : s.request.stop) cut = std::min(cut, s.held.find(stop));
  if (cut != std::string::npos) {
    s.state->push(std::string_view(s.held).substr(0, cut));
    s.held.clear();
    s.stopped = true;
    return true;
  }
  // Hold back the longest tail that begins some stop string: the next token may complete it.
  size_t keep = 0;
  if (!final)
    for (const std::string& stop : s.request.stop)
      for (size_t k = std::min(stop.size() - 1, s.held.size()); k > keep; --k)
        if (s.held.ends_with(std::string_view(stop).substr(0, k))) {
          keep = k;
          break;
        }
  s.state->push(std::string_view(s.held).substr(0, s.held.size() - keep));
  s.held.erase(0, s.held.size() - keep);
  return false;
}

void Scheduler::end(int slot, FinishReason reason, std::string error) {
  Slot& s = *slots_[static_cast<size_t>(slot)];
  // A finished generation delivers what it held back; a stop string found there makes it "stop".
  if ((reason == FinishReason::kStop || reason == FinishReason::kLength) && emit(s, new_text(s, true), true))
    reason = FinishReason::kStop;
  s.state->finish(reason, s.completion, std::move(error));
  try {
    engine_.release(slot);
  } catch (const std::exception&) {
    // A slot the engine cannot release is reused all the same: prefill() clears it.
  }
  slots_[static_cast<size_t>(slot)].reset();
  --active_;
  ++requests_finished_;
}

}  // namespace tessera::infer::server
