// Tests of FrameReader: frames cut correctly however the stream is split into reads, without
// copying them, and bad length prefixes refused before anything of the frame is allocated.
#include "rpc/transport/frame_reader.h"

#include <gtest/gtest.h>
#include <sys/uio.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rpc/transport/frame_format.h"

namespace rrpc::rpc {
namespace {

// A length-prefixed frame whose content is `n` bytes derived from `seed`.
std::string MakeFrame(size_t n, int seed) {
  std::string content(n, '\0');
  for (size_t i = 0; i < n; i++) content[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
  uint8_t prefix[kFrameLengthSize];
  EncodeBigEndian32(prefix, static_cast<uint32_t>(n));
  return std::string(reinterpret_cast<char*>(prefix), sizeof(prefix)) + content;
}

std::string Content(const std::string& frame) { return frame.substr(kFrameLengthSize); }

// Appends every complete frame the reader holds to `frames`.
Status TakeFrames(FrameReader* reader, std::vector<BlockSlice>* frames) {
  while (true) {
    BlockSlice frame;
    Result<bool> next = reader->NextFrame(&frame);
    if (!next.ok()) return next.status();
    if (!*next) return Status::OK();
    frames->push_back(std::move(frame));
  }
}

// Feeds `bytes` to `reader` in reads of at most `chunk` bytes (as a socket would deliver them),
// collecting every complete frame. Uses the reader as Connection does: writable_data() first,
// then writable_size() for the room it made.
Status Feed(FrameReader* reader, const std::string& bytes, size_t chunk,
            std::vector<BlockSlice>* frames) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint8_t* dst = reader->writable_data();
    const size_t room = reader->writable_size();
    if (room == 0) return Status::IllegalState("reader offered no room to read into");
    const size_t n = std::min({room, chunk, bytes.size() - pos});
    memcpy(dst, bytes.data() + pos, n);
    reader->Commit(n);
    pos += n;
    RRPC_RETURN_NOT_OK(TakeFrames(reader, frames));
  }
  return Status::OK();
}

// Feed() through ReadSpace(), as TcpTransport reads: each read fills the offered regions in order
// (as readv() does) with at most `chunk` bytes. Counts the reads, and the reads that came back
// short of the room offered (what tells the transport the socket is drained).
struct ScatterStats {
  int reads = 0;
  int short_reads = 0;
};
Status FeedScatter(FrameReader* reader, const std::string& bytes, size_t chunk,
                   std::vector<BlockSlice>* frames, ScatterStats* stats = nullptr) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    iovec iov[2];
    const int parts = reader->ReadSpace(iov);
    if (parts < 1 || parts > 2 || iov[0].iov_len == 0) {
      return Status::IllegalState("reader offered no room to read into");
    }
    size_t room = 0;
    size_t n = 0;
    for (int i = 0; i < parts; i++) {
      room += iov[i].iov_len;
      const size_t take = std::min({iov[i].iov_len, chunk - n, bytes.size() - pos});
      memcpy(iov[i].iov_base, bytes.data() + pos, take);
      pos += take;
      n += take;
    }
    reader->Commit(n);
    if (stats != nullptr) {
      stats->reads++;
      if (n < room) stats->short_reads++;
    }
    RRPC_RETURN_NOT_OK(TakeFrames(reader, frames));
  }
  return Status::OK();
}

// A large frame's block: room for the frame, and at most the slack and a page's rounding more.
void ExpectBlockSizedFor(const BlockSlice& f) {
  EXPECT_GE(f.block->capacity(), kFrameLengthSize + f.slice.size());
  EXPECT_LE(f.block->capacity(), kFrameLengthSize + f.slice.size() + 256 + 4095);
}

std::vector<std::string> SampleFrames() {
  // Sizes around the small read blocks used below, including ones whose prefix straddles them.
  std::vector<std::string> frames;
  int seed = 0;
  for (size_t n : {1, 2, 3, 5, 13, 16, 17, 60, 61, 200, 1, 4, 1000})
    frames.push_back(MakeFrame(n, seed++));
  return frames;
}

class FrameReaderSplitTest : public ::testing::TestWithParam<size_t> {};

// Feeds a reader with read blocks of `block` bytes the sample stream in two reads split at every
// byte boundary in turn, each read through `feed` (plain or scatter reads): the frames come out
// whole and nothing stays buffered.
using FeedFn =
    std::function<Status(FrameReader*, const std::string&, size_t, std::vector<BlockSlice>*)>;
void ExpectFramesWholeAtEverySplit(size_t block, const FeedFn& feed) {
  const std::vector<std::string> expected = SampleFrames();
  std::string stream;
  for (const auto& f : expected) stream += f;
  for (size_t split = 0; split <= stream.size(); split++) {
    FrameReader reader(1 << 20, block);
    std::vector<BlockSlice> frames;
    ASSERT_TRUE(feed(&reader, stream.substr(0, split), stream.size(), &frames).ok());
    ASSERT_TRUE(feed(&reader, stream.substr(split), stream.size(), &frames).ok());
    ASSERT_EQ(expected.size(), frames.size()) << "split at " << split;
    for (size_t i = 0; i < expected.size(); i++) {
      ASSERT_EQ(Content(expected[i]), frames[i].slice.ToString()) << "split " << split << " #" << i;
    }
    EXPECT_EQ(0u, reader.buffered());
  }
}

TEST_P(FrameReaderSplitTest, FramesSplitAtEveryByteBoundaryComeOutWhole) {
  ExpectFramesWholeAtEverySplit(
      GetParam(), [](FrameReader* r, const std::string& bytes, size_t chunk,
                     std::vector<BlockSlice>* frames) { return Feed(r, bytes, chunk, frames); });
}

TEST_P(FrameReaderSplitTest, FramesFedOneByteAtATimeComeOutWhole) {
  const std::vector<std::string> expected = SampleFrames();
  std::string stream;
  for (const auto& f : expected) stream += f;
  FrameReader reader(1 << 20, GetParam());
  std::vector<BlockSlice> frames;
  ASSERT_TRUE(Feed(&reader, stream, 1, &frames).ok());
  ASSERT_EQ(expected.size(), frames.size());
  // Earlier frames stay intact while the reader moves on and relocates partial frames.
  for (size_t i = 0; i < expected.size(); i++) {
    EXPECT_EQ(Content(expected[i]), frames[i].slice.ToString()) << i;
  }
}

// The same with scatter reads: a frame that fills its block exactly is read with the next prefix,
// or part of it, and whatever the split, the frames and the bytes after them come out whole.
TEST_P(FrameReaderSplitTest, ScatterReadsSplitAtEveryByteBoundaryComeOutWhole) {
  const size_t block = GetParam();
  ExpectFramesWholeAtEverySplit(
      block, [](FrameReader* r, const std::string& bytes, size_t chunk,
                std::vector<BlockSlice>* frames) { return FeedScatter(r, bytes, chunk, frames); });
  const std::vector<std::string> expected = SampleFrames();
  std::string stream;
  for (const auto& f : expected) stream += f;
  for (size_t chunk : {1, 2, 3, 5, 7}) {
    FrameReader reader(1 << 20, block);
    std::vector<BlockSlice> frames;
    ASSERT_TRUE(FeedScatter(&reader, stream, chunk, &frames).ok());
    ASSERT_EQ(expected.size(), frames.size()) << "chunk " << chunk;
    for (size_t i = 0; i < expected.size(); i++) {
      EXPECT_EQ(Content(expected[i]), frames[i].slice.ToString()) << "chunk " << chunk << " #" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ReadBlockSizes, FrameReaderSplitTest,
                         ::testing::Values(size_t{5}, size_t{16}, size_t{64}, size_t{4096}));

TEST(FrameReaderTest, ManyFramesInOneReadShareOneBlockWithoutCopies) {
  constexpr int kFrames = 100;
  std::string stream;
  for (int i = 0; i < kFrames; i++) stream += MakeFrame(10 + i % 7, i);
  FrameReader reader(1 << 20, 64 * 1024);
  uint8_t* dst = reader.writable_data();
  ASSERT_GE(reader.writable_size(), stream.size());
  memcpy(dst, stream.data(), stream.size());
  reader.Commit(stream.size());
  std::vector<BlockSlice> frames;
  BlockSlice frame;
  for (int i = 0; i < kFrames + 1; i++) {
    Result<bool> next = reader.NextFrame(&frame);
    ASSERT_TRUE(next.ok());
    if (!*next) break;
    frames.push_back(frame);
  }
  ASSERT_EQ(static_cast<size_t>(kFrames), frames.size());
  size_t offset = 0;
  for (int i = 0; i < kFrames; i++) {
    EXPECT_EQ(frames[0].block.get(), frames[i].block.get());
    // Each frame points into the read block where its bytes were read: no copy.
    EXPECT_EQ(dst + offset + kFrameLengthSize, frames[i].slice.data());
    offset += kFrameLengthSize + frames[i].slice.size();
  }
}

TEST(FrameReaderTest, FrameLargerThanTheReadBlockGetsABlockOfItsOwnSize) {
  constexpr size_t kBlock = 64;
  constexpr size_t kFrameSize = 10000;
  const std::string f = MakeFrame(kFrameSize, 3);
  FrameReader reader(1 << 20, kBlock);
  // First read: only what fits in a read block.
  uint8_t* dst = reader.writable_data();
  ASSERT_EQ(kBlock, reader.writable_size());
  memcpy(dst, f.data(), kBlock);
  reader.Commit(kBlock);
  BlockSlice frame;
  Result<bool> next = reader.NextFrame(&frame);
  ASSERT_TRUE(next.ok());
  ASSERT_FALSE(*next);
  // The prefix is known now: the rest of the frame has room in one contiguous block.
  reader.writable_data();
  EXPECT_EQ(kFrameLengthSize + kFrameSize - kBlock, reader.writable_size());
  std::vector<BlockSlice> frames;
  ASSERT_TRUE(Feed(&reader, f.substr(kBlock), f.size(), &frames).ok());
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(Content(f), frames[0].slice.ToString());
}

TEST(FrameReaderTest, ZeroLengthPrefixIsRefused) {
  FrameReader reader(1 << 20, 4096);
  std::vector<BlockSlice> frames;
  Status s = Feed(&reader, std::string(4, '\0') + "junk", 64, &frames);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_TRUE(frames.empty());
}

TEST(FrameReaderTest, OversizedPrefixIsRefusedBeforeBufferingTheFrame) {
  constexpr size_t kMax = 1 << 20;
  constexpr size_t kBlock = 4096;
  for (uint32_t length : {static_cast<uint32_t>(kMax + 1), 0x7fffffffu, 0xffffffffu}) {
    FrameReader reader(kMax, kBlock);
    uint8_t* dst = reader.writable_data();
    EncodeBigEndian32(dst, length);
    reader.Commit(kFrameLengthSize);
    BlockSlice frame;
    Result<bool> next = reader.NextFrame(&frame);
    ASSERT_FALSE(next.ok()) << length;
    EXPECT_TRUE(next.status().IsInvalidArgument()) << next.status().ToString();
    EXPECT_NE(std::string::npos, next.status().message().find(std::to_string(length)));
    // Nothing of the frame's size was allocated: the reader still holds one small read block.
    reader.writable_data();
    EXPECT_LE(reader.writable_size(), kBlock) << length;
    EXPECT_EQ(kFrameLengthSize, reader.buffered());
  }
}

TEST(FrameReaderTest, PrefixAtExactlyTheMaximumIsAccepted) {
  constexpr size_t kMax = 256 * 1024;
  FrameReader reader(kMax, 4096);
  uint8_t* dst = reader.writable_data();
  EncodeBigEndian32(dst, kMax);
  reader.Commit(kFrameLengthSize);
  BlockSlice frame;
  Result<bool> next = reader.NextFrame(&frame);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE(*next);  // waits for the body
  reader.writable_data();
  EXPECT_EQ(kMax, reader.writable_size());
}

TEST(FrameReaderTest, PartialPrefixAtTheEndOfABlockStillLeavesRoomToRead) {
  constexpr size_t kBlock = 16;
  // A 10-byte frame (14 with prefix) then 2 bytes of the next prefix fill the block exactly.
  const std::string first = MakeFrame(10, 1);
  const std::string second = MakeFrame(5, 2);
  FrameReader reader(1 << 20, kBlock);
  uint8_t* dst = reader.writable_data();
  ASSERT_EQ(kBlock, reader.writable_size());
  const std::string bytes = first + second.substr(0, 2);
  ASSERT_EQ(kBlock, bytes.size());
  memcpy(dst, bytes.data(), bytes.size());
  reader.Commit(bytes.size());
  BlockSlice frame;
  ASSERT_TRUE(*reader.NextFrame(&frame));
  ASSERT_FALSE(*reader.NextFrame(&frame));
  EXPECT_EQ(2u, reader.buffered());
  reader.writable_data();
  EXPECT_GT(reader.writable_size(), 0u);
  std::vector<BlockSlice> frames;
  ASSERT_TRUE(Feed(&reader, second.substr(2), 64, &frames).ok());
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(Content(second), frames[0].slice.ToString());
  EXPECT_EQ(Content(first), frame.slice.ToString());
}

TEST(FrameReaderTest, DropsItsBlockWhenEveryByteIsConsumed) {
  FrameReader reader(1 << 20, 4096);
  std::vector<BlockSlice> frames;
  ASSERT_TRUE(Feed(&reader, MakeFrame(20, 1) + MakeFrame(30, 2), 4096, &frames).ok());
  ASSERT_EQ(2u, frames.size());
  // Feed() stopped at NextFrame() == false with nothing buffered: the reader let the block go,
  // so the frames handed out hold the only references.
  EXPECT_EQ(0u, reader.buffered());
  EXPECT_TRUE(frames[0].block->HasOneRef() == false);  // frames[0] and frames[1] share it
  frames.pop_back();
  EXPECT_TRUE(frames[0].block->HasOneRef());
}

TEST(FrameReaderTest, KeepsItsBlockWhileAFrameIsPartial) {
  FrameReader reader(1 << 20, 4096);
  std::vector<BlockSlice> frames;
  const std::string second = MakeFrame(30, 2);
  ASSERT_TRUE(Feed(&reader, MakeFrame(20, 1) + second.substr(0, 10), 4096, &frames).ok());
  ASSERT_EQ(1u, frames.size());
  EXPECT_EQ(10u, reader.buffered());
  EXPECT_FALSE(frames[0].block->HasOneRef());
  ASSERT_TRUE(Feed(&reader, second.substr(10), 4096, &frames).ok());
  ASSERT_EQ(2u, frames.size());
  EXPECT_EQ(Content(second), frames[1].slice.ToString());
}

// After one frame larger than a read block, the reader reads only the next length prefix when it
// starts a frame afresh, and gives the frame a block of exactly its size: its bytes go from the
// "socket" to their final place without being moved (the copy counter sees nothing), and a small
// frame afterwards returns the reader to whole-block reads.
TEST(FrameReaderTest, LargeFramesAreReadIntoBlocksOfTheirSizeWithoutMovingBytes) {
  FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
  reader.set_copy_side(CopySide::kClient);
  std::vector<BlockSlice> frames;
  // The first large frame arrives in a block of 64: its first bytes are moved once.
  ASSERT_TRUE(Feed(&reader, MakeFrame(1000, 1), 1 << 20, &frames).ok());
  ASSERT_EQ(1u, frames.size());
  const CopyTotals before = ReadCopyTotals();
  std::string stream;
  for (int i = 0; i < 5; i++) stream += MakeFrame(500 + i * 100, i + 2);
  ASSERT_TRUE(Feed(&reader, stream, 1 << 20, &frames).ok());
  ASSERT_EQ(6u, frames.size());
  EXPECT_EQ(before.get(CopySide::kClient, CopyKind::kStream),
            ReadCopyTotals().get(CopySide::kClient, CopyKind::kStream));
  for (int i = 0; i < 5; i++) {
    const BlockSlice& f = frames[1 + i];
    EXPECT_EQ(Content(MakeFrame(500 + i * 100, i + 2)), f.slice.ToString());
    // A block of its size, after the length prefix (BlockForFrame's slack and page rounding).
    ExpectBlockSizedFor(f);
  }
  // A small frame next: one short read of its prefix, then whole blocks again.
  ASSERT_TRUE(Feed(&reader, MakeFrame(10, 9) + MakeFrame(20, 10), 1 << 20, &frames).ok());
  ASSERT_EQ(8u, frames.size());
  EXPECT_EQ(Content(MakeFrame(20, 10)), frames.back().slice.ToString());
  reader.writable_data();
  EXPECT_EQ(64u, reader.writable_size());
}

// Back-to-back large frames through scatter reads: after the first, one read completes each frame
// and brings the next one's length prefix (the read that would only have returned EAGAIN is gone),
// no payload byte is moved, each frame fills a block of its own size, and the read that drains
// the stream comes back short.
TEST(FrameReaderTest, ScatterReadsTakeEachLargeFrameAndTheNextPrefixInOneRead) {
  FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
  reader.set_copy_side(CopySide::kClient);
  std::vector<BlockSlice> frames;
  ASSERT_TRUE(FeedScatter(&reader, MakeFrame(1000, 1), 1 << 20, &frames).ok());
  ASSERT_EQ(1u, frames.size());
  const CopyTotals before = ReadCopyTotals();
  constexpr int kFrames = 5;
  std::string stream;
  for (int i = 0; i < kFrames; i++) stream += MakeFrame(500 + i * 100, i + 2);
  // The stream arrives whole, as a socket that holds all of it would give it.
  ScatterStats stats;
  ASSERT_TRUE(FeedScatter(&reader, stream, 1 << 20, &frames, &stats).ok());
  ASSERT_EQ(1u + kFrames, frames.size());
  // One read of the first prefix (the reader is in large-frame mode), then one per frame.
  EXPECT_EQ(1 + kFrames, stats.reads);
  EXPECT_EQ(1, stats.short_reads);  // the last: nothing after the last frame
  EXPECT_EQ(before.get(CopySide::kClient, CopyKind::kStream),
            ReadCopyTotals().get(CopySide::kClient, CopyKind::kStream));
  for (int i = 0; i < kFrames; i++) {
    const BlockSlice& f = frames[1 + i];
    EXPECT_EQ(Content(MakeFrame(500 + i * 100, i + 2)), f.slice.ToString());
    ExpectBlockSizedFor(f);
  }
  EXPECT_EQ(0u, reader.buffered());

  // The second region is the next prefix only, and only while a frame fills the block exactly.
  const std::string next = MakeFrame(300, 9);
  uint8_t* dst = reader.writable_data();
  memcpy(dst, next.data(), kFrameLengthSize);
  reader.Commit(kFrameLengthSize);
  BlockSlice frame;
  ASSERT_FALSE(*reader.NextFrame(&frame));
  iovec iov[2];
  ASSERT_EQ(2, reader.ReadSpace(iov));
  EXPECT_EQ(next.size() - kFrameLengthSize, iov[0].iov_len);
  EXPECT_EQ(kFrameLengthSize, iov[1].iov_len);
  // A small frame next: its prefix sizes a whole read block, and reads go back to one region.
  const std::string small = MakeFrame(10, 10);
  memcpy(iov[0].iov_base, next.data() + kFrameLengthSize, iov[0].iov_len);
  memcpy(iov[1].iov_base, small.data(), kFrameLengthSize);
  reader.Commit(iov[0].iov_len + kFrameLengthSize);
  EXPECT_EQ(next.size() + kFrameLengthSize, reader.buffered());
  ASSERT_TRUE(*reader.NextFrame(&frame));
  EXPECT_EQ(Content(next), frame.slice.ToString());
  ASSERT_FALSE(*reader.NextFrame(&frame));
  EXPECT_EQ(kFrameLengthSize, reader.buffered());
  ASSERT_EQ(1, reader.ReadSpace(iov));
  EXPECT_EQ(64u - kFrameLengthSize, iov[0].iov_len);
}

// Large frames of one size, one after another (a bulk stream of equal blocks): once two have had
// the size, the next frame is read whole at that size with the prefix after it, in one read and
// without moving a byte; no read of its length prefix alone.
TEST(FrameReaderTest, EqualLargeFramesAreReadWholeAtTheirSizeWithoutAPrefixRead) {
  FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
  reader.set_copy_side(CopySide::kClient);
  std::vector<BlockSlice> frames;
  constexpr size_t kSize = 1000;
  ASSERT_TRUE(FeedScatter(&reader, MakeFrame(kSize, 1), 1 << 20, &frames).ok());
  // One large frame so far: no guess, the next read is its prefix alone.
  reader.writable_data();
  EXPECT_EQ(kFrameLengthSize, reader.writable_size());
  ASSERT_TRUE(FeedScatter(&reader, MakeFrame(kSize, 2), 1 << 20, &frames).ok());
  // Two of one size: room for a third of that size, then for the prefix after it.
  iovec iov[2];
  ASSERT_EQ(2, reader.ReadSpace(iov));
  EXPECT_EQ(kFrameLengthSize + kSize, iov[0].iov_len);
  EXPECT_EQ(kFrameLengthSize, iov[1].iov_len);

  const CopyTotals before = ReadCopyTotals();
  constexpr int kFrames = 4;
  std::string stream;
  for (int i = 0; i < kFrames; i++) stream += MakeFrame(kSize, 3 + i);
  ScatterStats stats;
  ASSERT_TRUE(FeedScatter(&reader, stream, 1 << 20, &frames, &stats).ok());
  ASSERT_EQ(2u + kFrames, frames.size());
  EXPECT_EQ(kFrames, stats.reads);  // one per frame, each bringing the next prefix
  EXPECT_EQ(1, stats.short_reads);  // the last: nothing after the last frame
  EXPECT_EQ(before.get(CopySide::kClient, CopyKind::kStream),
            ReadCopyTotals().get(CopySide::kClient, CopyKind::kStream));
  for (int i = 0; i < kFrames; i++) {
    EXPECT_EQ(Content(MakeFrame(kSize, 3 + i)), frames[2 + i].slice.ToString());
  }
  EXPECT_EQ(0u, reader.buffered());
}

// A size change after a run of equal sizes: the guessed read was too short or too long, the
// frames still come out whole, the bytes moved are at most the guessed frame's, and the reader
// guesses no more until two frames share a size again.
TEST(FrameReaderTest, ASizeChangeAfterARunCopiesAtMostTheGuessedFrameOnce) {
  constexpr size_t kSize = 1000;
  for (const size_t changed : {size_t{1500}, size_t{600}, size_t{200}}) {
    SCOPED_TRACE(changed);
    FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
    reader.set_copy_side(CopySide::kClient);
    std::vector<BlockSlice> frames;
    ASSERT_TRUE(
        FeedScatter(&reader, MakeFrame(kSize, 1) + MakeFrame(kSize, 2), 1 << 20, &frames).ok());
    const CopyTotals before = ReadCopyTotals();
    // The changed frame, then a frame of the old size, then one of the new, arriving together.
    const std::vector<std::string> expected = {MakeFrame(changed, 3), MakeFrame(kSize, 4),
                                               MakeFrame(changed, 5)};
    ASSERT_TRUE(
        FeedScatter(&reader, expected[0] + expected[1] + expected[2], 1 << 20, &frames).ok());
    ASSERT_EQ(5u, frames.size());
    for (size_t i = 0; i < expected.size(); i++) {
      EXPECT_EQ(Content(expected[i]), frames[2 + i].slice.ToString());
    }
    EXPECT_LE(ReadCopyTotals().get(CopySide::kClient, CopyKind::kStream) -
                  before.get(CopySide::kClient, CopyKind::kStream),
              kSize + kFrameLengthSize);  // the guessed read's room, less the prefix
    // The last two sizes differ: the next read is a prefix alone.
    reader.writable_data();
    EXPECT_EQ(kFrameLengthSize, reader.writable_size());
  }
}

// Alternating sizes never make two in a row: never guessed, never a byte moved.
TEST(FrameReaderTest, AlternatingLargeSizesAreNeverGuessed) {
  FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
  reader.set_copy_side(CopySide::kClient);
  std::vector<BlockSlice> frames;
  ASSERT_TRUE(FeedScatter(&reader, MakeFrame(1000, 1), 1 << 20, &frames).ok());
  const CopyTotals before = ReadCopyTotals();
  for (int i = 0; i < 6; i++) {
    const std::string frame = MakeFrame(i % 2 == 0 ? 2000 : 1000, i + 2);
    reader.writable_data();
    EXPECT_EQ(kFrameLengthSize, reader.writable_size());
    ASSERT_TRUE(FeedScatter(&reader, frame, 1 << 20, &frames).ok());
    EXPECT_EQ(Content(frame), frames.back().slice.ToString());
  }
  EXPECT_EQ(before.get(CopySide::kClient, CopyKind::kStream),
            ReadCopyTotals().get(CopySide::kClient, CopyKind::kStream));
}

// Runs of equal large frames with size changes and small frames between them, split into reads of
// many sizes, plain and scattered: every frame comes out whole whatever the guess met.
TEST(FrameReaderTest, GuessedReadsCutEveryStreamCorrectlyWhateverTheReadSizes) {
  std::vector<std::string> expected;
  int seed = 0;
  for (size_t n : {700, 700, 700, 700, 900, 900, 900, 300, 300, 300, 10, 300, 300, 300, 5, 700})
    expected.push_back(MakeFrame(n, seed++));
  std::string stream;
  for (const auto& f : expected) stream += f;
  for (const bool scatter : {false, true}) {
    for (const size_t chunk : {1, 3, 4, 7, 64, 299, 304, 700, 704, 708, 1000, 4096, 100000}) {
      SCOPED_TRACE(std::to_string(chunk) + (scatter ? " scatter" : " plain"));
      FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
      std::vector<BlockSlice> frames;
      ASSERT_TRUE((scatter ? FeedScatter(&reader, stream, chunk, &frames)
                           : Feed(&reader, stream, chunk, &frames))
                      .ok());
      ASSERT_EQ(expected.size(), frames.size());
      for (size_t i = 0; i < expected.size(); i++) {
        ASSERT_EQ(Content(expected[i]), frames[i].slice.ToString()) << "#" << i;
      }
      EXPECT_EQ(0u, reader.buffered());
    }
  }
}

// Sizes that wander within the guess's slack (a varint in each header), fed in pieces of every
// size up to two read blocks (RDMA delivers a frame in buffer-sized fragments), plain and
// scattered, with seeded randomness: every frame comes out whole, none is refused.
TEST(FrameReaderTest, NearlyEqualSizesInRandomPiecesComeOutWhole) {
  std::vector<std::string> expected;
  std::mt19937 rng(7);
  for (int i = 0; i < 300; i++) {
    const size_t base = i < 100 ? 3000 : (i < 200 ? 1500 : 3000);
    expected.push_back(MakeFrame(base + rng() % 7 + (i % 50 == 0 ? 400 : 0), i));
  }
  std::string stream;
  for (const auto& f : expected) stream += f;
  for (const bool scatter : {false, true}) {
    FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/1024);
    std::vector<BlockSlice> frames;
    size_t pos = 0;
    while (pos < stream.size()) {
      const size_t piece = std::min<size_t>(1 + rng() % 2048, stream.size() - pos);
      const std::string part = stream.substr(pos, piece);
      ASSERT_TRUE((scatter ? FeedScatter(&reader, part, piece, &frames)
                           : Feed(&reader, part, piece, &frames))
                      .ok())
          << pos;
      pos += piece;
    }
    ASSERT_EQ(expected.size(), frames.size()) << scatter;
    for (size_t i = 0; i < expected.size(); i++) {
      ASSERT_EQ(Content(expected[i]), frames[i].slice.ToString()) << "#" << i << " " << scatter;
    }
    EXPECT_EQ(0u, reader.buffered());
  }
}

// A bad prefix that arrives in the tail is refused as it would be in the block, and the reader
// allocates nothing of the size it claims.
TEST(FrameReaderTest, BadPrefixReadIntoTheTailIsRefused) {
  constexpr size_t kMax = 4096;
  for (uint32_t length : {0u, static_cast<uint32_t>(kMax + 1), 0xffffffffu}) {
    FrameReader reader(kMax, /*read_block_size=*/64);
    std::vector<BlockSlice> frames;
    ASSERT_TRUE(FeedScatter(&reader, MakeFrame(1000, 1).substr(0, 100), 1 << 20, &frames).ok());
    std::string bad(kFrameLengthSize, '\0');
    EncodeBigEndian32(reinterpret_cast<uint8_t*>(bad.data()), length);
    Status s = FeedScatter(&reader, MakeFrame(1000, 1).substr(100) + bad, 1 << 20, &frames);
    ASSERT_EQ(1u, frames.size()) << length;
    EXPECT_TRUE(length == 0 ? s.IsCorruption() : s.IsInvalidArgument()) << s.ToString();
    EXPECT_EQ(kFrameLengthSize, reader.buffered());
    reader.writable_data();
    EXPECT_LE(reader.writable_size(), 64u) << length;
  }
}

// Bytes read into the tail are part of what the reader holds: counted, and handed over with the
// stream before and after the frame ahead of them is taken.
TEST(FrameReaderTest, TakeBufferedIncludesTheTail) {
  const std::string large = MakeFrame(200, 1);
  const std::string next = MakeFrame(5, 2);
  for (bool take_frame_first : {false, true}) {
    FrameReader reader(1 << 20, /*read_block_size=*/64);
    uint8_t* dst = reader.writable_data();
    memcpy(dst, large.data(), 64);
    reader.Commit(64);
    BlockSlice frame;
    ASSERT_FALSE(*reader.NextFrame(&frame));
    iovec iov[2];
    ASSERT_EQ(2, reader.ReadSpace(iov));
    memcpy(iov[0].iov_base, large.data() + 64, iov[0].iov_len);
    memcpy(iov[1].iov_base, next.data(), 3);  // part of the next prefix
    reader.Commit(iov[0].iov_len + 3);
    EXPECT_EQ(large.size() - 64 + 64 + 3, reader.buffered());
    std::string expected = large + next.substr(0, 3);
    if (take_frame_first) {
      ASSERT_TRUE(*reader.NextFrame(&frame));
      EXPECT_EQ(Content(large), frame.slice.ToString());
      expected = next.substr(0, 3);
    }
    EXPECT_EQ(expected, reader.TakeBuffered()) << take_frame_first;
    EXPECT_EQ(0u, reader.buffered());
  }
}

// Seed() takes bytes handed over from another transport, however many: more than a read block
// (once a hang: the reader slid a full block onto itself forever), onto an empty reader and onto
// one already holding a partial frame.
TEST(FrameReaderTest, SeedTakesMoreThanAReadBlockAtOnce) {
  FrameReader reader(/*max_frame_size=*/1 << 20, /*read_block_size=*/64);
  std::string stream;
  for (int i = 0; i < 6; i++) stream += MakeFrame(40 + i * 30, i);
  const std::string partial = MakeFrame(100, 7);
  reader.Seed(Slice(stream + partial.substr(0, 50)));
  std::vector<BlockSlice> frames;
  while (true) {
    BlockSlice frame;
    Result<bool> next = reader.NextFrame(&frame);
    ASSERT_TRUE(next.ok());
    if (!*next) break;
    frames.push_back(std::move(frame));
  }
  ASSERT_EQ(6u, frames.size());
  EXPECT_EQ(Content(MakeFrame(190, 5)), frames[5].slice.ToString());
  reader.Seed(Slice(partial.substr(50)));
  ASSERT_TRUE(Feed(&reader, MakeFrame(3, 8), 64, &frames).ok());
  ASSERT_EQ(8u, frames.size());
  EXPECT_EQ(Content(partial), frames[6].slice.ToString());
  EXPECT_EQ(Content(MakeFrame(3, 8)), frames[7].slice.ToString());
}

// On a thread that recycles read blocks (a reactor's), a lone frame read alone takes its block
// to the call, and the next read goes into that same block again once the frame is released,
// never while it is held: its bytes are still being read.
TEST(FrameReaderTest, ARecyclingThreadReadsIntoItsSpareBlockOnceItsFramesAreGone) {
  std::thread reactor([] {
    FrameReader::RecycleReadBlocksOnThisThread();
    FrameReader reader(1 << 20, 4096);
    std::vector<BlockSlice> frames;
    ASSERT_TRUE(Feed(&reader, MakeFrame(40, 1), 4096, &frames).ok());
    ASSERT_EQ(1u, frames.size());
    const Block* first = frames[0].block.get();

    // Held: the next frame gets another block, and the first keeps its bytes.
    ASSERT_TRUE(Feed(&reader, MakeFrame(50, 2), 4096, &frames).ok());
    ASSERT_EQ(2u, frames.size());
    EXPECT_NE(first, frames[1].block.get());
    EXPECT_EQ(Content(MakeFrame(40, 1)), frames[0].slice.ToString());
    const Block* second = frames[1].block.get();

    // Released: the spare (the block handed out last) is read into again.
    frames.clear();
    ASSERT_TRUE(Feed(&reader, MakeFrame(60, 3), 4096, &frames).ok());
    ASSERT_EQ(1u, frames.size());
    EXPECT_EQ(second, frames[0].block.get());
    EXPECT_EQ(Content(MakeFrame(60, 3)), frames[0].slice.ToString());
    EXPECT_FALSE(frames[0].block->HasOneRef());  // the frame's and the spare's

    // Stopping drops the spare: the frame holds the only reference.
    FrameReader::StopRecyclingReadBlocksOnThisThread();
    EXPECT_TRUE(frames[0].block->HasOneRef());
    // A frame larger than the read block gets a block of its own size, never the spare.
    FrameReader::RecycleReadBlocksOnThisThread();
    frames.clear();
    ASSERT_TRUE(Feed(&reader, MakeFrame(5000, 4), 8192, &frames).ok());
    ASSERT_EQ(1u, frames.size());
    EXPECT_EQ(Content(MakeFrame(5000, 4)), frames[0].slice.ToString());
    FrameReader::StopRecyclingReadBlocksOnThisThread();
  });
  reactor.join();
}

}  // namespace
}  // namespace rrpc::rpc
