// The continuous-batching scheduler against the fake engine (server_test_fakes.h): requests join
// a running batch between decode steps and leave it when they end, as the engine's call log
// shows; each way of ending (EOS, stop string, max_tokens, context end, cancel, engine error)
// gives the expected text and finish reason; text never splits a UTF-8 character nor shows the
// start of a stop string early.
#include <gtest/gtest.h>

#include <thread>

#include "infer/server_test_fakes.h"
#include "tessera/infer/server/scheduler.h"

namespace tessera::infer::server {
namespace {

using testing::FakeEngine;
using testing::FakeTokenizer;
using namespace std::chrono_literals;

GenerationRequest request(const FakeTokenizer& tok, std::string_view prompt, int64_t max_tokens,
                          std::vector<std::string> stop = {}) {
  GenerationRequest r;
  r.prompt = tok.encode(prompt);
  r.max_tokens = max_tokens;
  r.stop = std::move(stop);
  return r;  // greedy sampling
}

// The text delivered since the last call (without waiting).
std::string take(RequestState& s) {
  std::string text;
  s.wait(text, 0ms);
  return text;
}

struct Fixture {
  explicit Fixture(int slots = 4, int64_t target = 64, int64_t prefill = 16,
                   SchedulerOptions o = {.eos_id = 0})
      : engine(slots, target, prefill), scheduler(engine, tok, o) {}
  FakeTokenizer tok;
  FakeEngine engine;
  Scheduler scheduler;
};

TEST(ServerScheduler, RequestsJoinAndLeaveTheBatchBetweenDecodeSteps) {
  Fixture f;
  auto a = f.scheduler.submit(request(f.tok, "a", 3));
  ASSERT_TRUE(a);
  EXPECT_TRUE(f.scheduler.step());  // prefill a, sample 'b'; decode [a] -> 'c'
  auto b = f.scheduler.submit(request(f.tok, "m", 4));
  EXPECT_TRUE(f.scheduler.step());  // prefill b -> 'n'; decode [a, b] -> a: 'd' (3 tokens: done), b: 'o'
  auto c = f.scheduler.submit(request(f.tok, "u", 2));
  EXPECT_TRUE(f.scheduler.step());  // prefill c -> 'v' into a's freed slot 0; decode [c, b]
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(f.engine.prefills, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(f.engine.decodes, (std::vector<std::vector<int>>{{0}, {0, 1}, {0, 1}, {1}}));
  EXPECT_EQ(f.engine.releases, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(take(*a), "bcd");
  EXPECT_EQ(a->finish_reason(), FinishReason::kLength);
  EXPECT_EQ(a->prompt_tokens(), 1);
  EXPECT_EQ(a->completion_tokens(), 3);
  EXPECT_EQ(take(*b), "nopq");
  EXPECT_EQ(take(*c), "vw");
  const SchedulerStats s = f.scheduler.stats();
  EXPECT_EQ(s.requests_finished, 3);
  EXPECT_EQ(s.decode_steps, 4);
  EXPECT_EQ(s.max_decode_batch, 2);
  EXPECT_EQ(s.tokens_generated, 9);
  EXPECT_EQ(s.active, 0);
}

TEST(ServerScheduler, MoreRequestsThanSlotsWaitInTheQueue) {
  Fixture f(/*slots=*/2);
  std::vector<std::shared_ptr<RequestState>> r;
  for (const char* p : {"a", "e", "i", "o"}) r.push_back(f.scheduler.submit(request(f.tok, p, 2)));
  EXPECT_EQ(f.scheduler.stats().queued, 4);
  while (f.scheduler.step()) {
  }
  // Two at a time: each decodes once after its prefill, and the next pair takes the freed slots.
  EXPECT_EQ(f.engine.decodes, (std::vector<std::vector<int>>{{0, 1}, {0, 1}}));
  EXPECT_EQ(take(*r[0]) + take(*r[1]) + take(*r[2]) + take(*r[3]), "bcfgjkpq");
}

TEST(ServerScheduler, EosEndsWithStopAndIsNotPartOfTheText) {
  Fixture f;
  auto r = f.scheduler.submit(request(f.tok, "x", 10));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(take(*r), "yz");
  EXPECT_EQ(r->finish_reason(), FinishReason::kStop);
  EXPECT_EQ(r->completion_tokens(), 3);  // y, z, EOS
}

TEST(ServerScheduler, StopStringEndsTheTextBeforeIt) {
  Fixture f;
  auto r = f.scheduler.submit(request(f.tok, "a", 20, {"xyz", "def"}));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(take(*r), "bc");
  EXPECT_EQ(r->finish_reason(), FinishReason::kStop);
  EXPECT_EQ(r->completion_tokens(), 5);  // b c d e f
  EXPECT_EQ(f.engine.releases, (std::vector<int>{0}));
}

TEST(ServerScheduler, TextThatMayStartAStopStringIsHeldUntilItCannot) {
  Fixture f;
  auto r = f.scheduler.submit(request(f.tok, "a", 6, {"dx"}));
  std::vector<std::string> steps;
  while (f.scheduler.step()) steps.push_back(take(*r));
  // 'b' 'c' | 'd' held (it may begin "dx") | 'e' shows it did not: "de" | 'f' | 'g' (last).
  EXPECT_EQ(steps, (std::vector<std::string>{"bc", "", "de", "f", "g"}));
  EXPECT_EQ(r->finish_reason(), FinishReason::kLength);
}

TEST(ServerScheduler, HeldTextIsDeliveredWhenTheGenerationEnds) {
  Fixture f;
  auto r = f.scheduler.submit(request(f.tok, "a", 3, {"dx"}));  // b c d: ends holding 'd'
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(take(*r), "bcd");
  EXPECT_EQ(r->finish_reason(), FinishReason::kLength);
}

TEST(ServerScheduler, AUtf8CharacterSplitOverTwoTokensIsDeliveredWhole) {
  Fixture f;
  auto r = f.scheduler.submit(request(f.tok, "?", 4));  // '!', C3, A9, 'a'
  std::vector<std::string> steps;
  while (f.scheduler.step()) steps.push_back(take(*r));
  // Step 1 samples '!' (prefill) and C3 (decode): C3 alone is held back.
  EXPECT_EQ(steps, (std::vector<std::string>{"!", "\xC3\xA9", "a"}));
}

TEST(ServerScheduler, EndOfTheContextEndsWithLength) {
  Fixture f(/*slots=*/1, /*target=*/6, /*prefill=*/4);
  // 2 prompt tokens + 4 = 6 positions: the request fits exactly.
  auto r = f.scheduler.submit(request(f.tok, "ab", 4));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(take(*r), "cdef");
  EXPECT_EQ(r->finish_reason(), FinishReason::kLength);
  // Over the context, or a prompt over the prefill limit: refused before it is queued.
  EXPECT_THROW(f.scheduler.submit(request(f.tok, "ab", 5)), Error);
  EXPECT_THROW(f.scheduler.submit(request(f.tok, "abcde", 1)), Error);
  EXPECT_THROW(f.scheduler.submit(request(f.tok, "", 1)), Error);
}

TEST(ServerScheduler, SamplingStaysInsideTheTokenizersVocabulary) {
  // After ' ' the fake model prefers id 32, which the tokenizer lacks; with sample_vocab = 32 the
  // greedy choice among the rest is id 0 (all tie at 0; the lowest wins), EOS.
  Fixture f(4, 64, 16, {.eos_id = 0, .sample_vocab = 32});
  auto r = f.scheduler.submit(request(f.tok, " ", 5));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(take(*r), "");
  EXPECT_EQ(r->finish_reason(), FinishReason::kStop);
}

TEST(ServerScheduler, AFailureInOneRequestsTextEndsOnlyThatRequest) {
  // Without the sample_vocab limit the fake model's id 32 reaches the tokenizer, which throws.
  Fixture f;
  auto bad = f.scheduler.submit(request(f.tok, " ", 5));
  auto good = f.scheduler.submit(request(f.tok, "a", 3));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(bad->finish_reason(), FinishReason::kError);
  EXPECT_NE(bad->error().find("outside [0, 32)"), std::string::npos) << bad->error();
  EXPECT_EQ(take(*good), "bcd");
  EXPECT_EQ(good->finish_reason(), FinishReason::kLength);
}

TEST(ServerScheduler, ACancelledRequestFreesItsSlotAtTheNextStep) {
  Fixture f(/*slots=*/1);
  auto a = f.scheduler.submit(request(f.tok, "a", 20));
  auto b = f.scheduler.submit(request(f.tok, "m", 2));
  f.scheduler.step();
  a->cancel();
  f.scheduler.step();  // a released before decoding; b takes the slot at the following step
  while (f.scheduler.step()) {
  }
  std::string text;
  EXPECT_TRUE(a->wait(text, 0ms));
  EXPECT_EQ(a->finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(take(*b), "no");
  EXPECT_EQ(f.engine.releases, (std::vector<int>{0, 0}));
}

TEST(ServerScheduler, AFullQueueRefusesWithAReason) {
  Fixture f(1, 64, 16, {.max_queued = 1, .eos_id = 0});
  std::string why;
  EXPECT_TRUE(f.scheduler.submit(request(f.tok, "a", 2), &why));
  EXPECT_FALSE(f.scheduler.submit(request(f.tok, "b", 2), &why));
  EXPECT_NE(why.find("queue is full"), std::string::npos) << why;
}

TEST(ServerScheduler, AnEngineFailureEndsItsRequestsAndTheSchedulerGoesOn) {
  Fixture f;
  f.engine.fail_decode = true;
  auto a = f.scheduler.submit(request(f.tok, "a", 5));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(a->finish_reason(), FinishReason::kError);
  EXPECT_NE(a->error().find("decode failed"), std::string::npos) << a->error();
  f.engine.fail_decode = false;
  auto b = f.scheduler.submit(request(f.tok, "a", 2));
  while (f.scheduler.step()) {
  }
  EXPECT_EQ(take(*b), "bc");
  EXPECT_EQ(f.scheduler.stats().active, 0);
}

TEST(ServerScheduler, TheThreadServesConcurrentRequestsAndStopCancelsTheRest) {
  Fixture f(/*slots=*/4);
  std::vector<std::shared_ptr<RequestState>> r;
  for (const char* p : {"a", "f", "k", "p"}) r.push_back(f.scheduler.submit(request(f.tok, p, 5)));
  f.scheduler.start();  // all four are queued: the first step admits them together
  const std::vector<std::string> want = {"bcdef", "ghijk", "lmnop", "qrstu"};
  for (size_t i = 0; i < r.size(); ++i) {
    std::string text;
    while (!r[i]->wait(text, 1000ms)) {
    }
    EXPECT_EQ(text, want[i]);
  }
  EXPECT_EQ(f.scheduler.stats().max_decode_batch, 4);
  auto slow = f.scheduler.submit(request(f.tok, "a", 40));
  f.scheduler.stop();
  std::string text;
  EXPECT_TRUE(slow->wait(text, 0ms));
  EXPECT_NE(slow->finish_reason(), FinishReason::kNone);
  EXPECT_FALSE(f.scheduler.submit(request(f.tok, "a", 2)));  // stopped: refused
}

TEST(ServerScheduler, IncompleteUtf8Detection) {
  EXPECT_FALSE(ends_with_incomplete_utf8(""));
  EXPECT_FALSE(ends_with_incomplete_utf8("abc"));
  EXPECT_TRUE(ends_with_incomplete_utf8("a\xC3"));
  EXPECT_FALSE(ends_with_incomplete_utf8("a\xC3\xA9"));
  EXPECT_TRUE(ends_with_incomplete_utf8("\xE2\x82"));       // 3-byte character, 2 bytes so far
  EXPECT_FALSE(ends_with_incomplete_utf8("\xE2\x82\xAC"));  // the euro sign
  EXPECT_TRUE(ends_with_incomplete_utf8("\xF0\x9F\x98"));
  EXPECT_TRUE(ends_with_incomplete_utf8("x\xEF\xBF\xBD"));  // U+FFFD: a decoder's stand-in
}

}  // namespace
}  // namespace tessera::infer::server
