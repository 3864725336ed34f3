// SWORD Bible modules in the zText format (Debian's sword-text-* packages), read without the SWORD
// library: the books, chapters and verse texts of a module, with OSIS markup and notes removed.
//
// A zText module folder holds, per testament (ot, nt):
//   <t>.bzs  blocks: (u32 offset, u32 size, u32 uncompressed size) little-endian, 12 bytes each,
//            locating zlib-compressed blocks in <t>.bzz;
//   <t>.bzv  entries in versification order: (u32 block, u32 offset, u16 size), 10 bytes each, the
//            bytes of one verse (or of a book or chapter heading) inside the uncompressed block.
// Entries hold OSIS XML fragments. Book starts are <div type="book" osisID=".." sID=".."/>, chapter
// starts <chapter osisID="Gen.1" sID=".."/>; the book's display name is its x-usfm-toc2 milestone.
// Kept: the words of each verse (including canonical titles such as Psalm superscriptions), one
// line per verse with whitespace collapsed. Dropped: <note> bodies (footnotes, cross references),
// non-canonical titles, every tag, and text outside a book's chapters (prefaces, glossaries).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::corpus {

struct SwordChapter {
  std::string number;
  std::vector<std::string> verses;
};

struct SwordBook {
  std::string osis_id;  // "Gen", "1Macc", ...
  std::string name;     // "Genesis" (from the module's table of contents; the OSIS id if it has none)
  std::vector<SwordChapter> chapters;
};

// Reads ot.* then nt.* (either may be absent) of the zText module in `module_dir`. Throws kIo
// naming the file and offset for missing or corrupt data.
std::vector<SwordBook> read_sword_ztext(const std::filesystem::path& module_dir);

}  // namespace tessera::corpus
