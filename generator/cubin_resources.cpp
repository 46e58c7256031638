// Registers and stack frame of one kernel, read from the cubin itself. ptxas' -v report is not
// always there: NVRTC 13 answers a repeated compile of an identical program from its cache with
// an empty log. The cubin always carries the figures, in the ELF's .nv.info section as
// attributes keyed by the kernel's symbol index (the layout cuobjdump -elf prints).
#include <cstdint>
#include <cstring>
#include <string>

#include "generator/compiled_kernel.hpp"

namespace tilesmith {
namespace {

// EIATTR codes and formats of .nv.info records: {u8 format, u8 attribute, then by format:
// u8 value (0x01), u16 value (0x02/0x03), or u16 size + payload (0x04)}.
constexpr std::uint8_t kFormatNone = 0x01, kFormatByte = 0x02, kFormatHalf = 0x03,
                       kFormatSized = 0x04;
constexpr std::uint8_t kAttrFrameSize = 0x11, kAttrRegCount = 0x2f;
constexpr std::uint32_t kSectionSymtab = 2;

class ElfView {
 public:
  ElfView(const std::vector<char>& bytes, const std::string& kernel) : bytes_(bytes), kernel_(kernel) {
    if (bytes.size() < 64 || std::memcmp(bytes.data(), "\x7f" "ELF", 4) != 0 || bytes[4] != 2)
      fail("not a 64-bit ELF file");
  }

  template <class T>
  T read(std::uint64_t offset) const {
    if (offset + sizeof(T) > bytes_.size() || offset + sizeof(T) < offset) fail("truncated");
    T value;
    std::memcpy(&value, bytes_.data() + offset, sizeof(T));
    return value;
  }

  struct Section {
    std::string name;
    std::uint32_t type;
    std::uint64_t offset, size, entry_size;
    std::uint32_t link;
  };

  std::vector<Section> sections() const {
    const auto table = read<std::uint64_t>(0x28);
    const auto entry = read<std::uint16_t>(0x3a), count = read<std::uint16_t>(0x3c),
               names_index = read<std::uint16_t>(0x3e);
    if (names_index >= count) fail("no section name table");
    auto header = [&](std::uint16_t i) { return table + std::uint64_t(i) * entry; };
    const std::uint64_t names = read<std::uint64_t>(header(names_index) + 0x18);
    std::vector<Section> result(count);
    for (std::uint16_t i = 0; i < count; ++i) {
      const std::uint64_t at = header(i);
      result[i] = {string_at(names + read<std::uint32_t>(at)), read<std::uint32_t>(at + 4),
                   read<std::uint64_t>(at + 0x18), read<std::uint64_t>(at + 0x20),
                   read<std::uint64_t>(at + 0x38), read<std::uint32_t>(at + 0x28)};
    }
    return result;
  }

  std::string string_at(std::uint64_t offset) const {
    if (offset >= bytes_.size()) fail("string outside the file");
    const char* start = bytes_.data() + offset;
    const void* end = std::memchr(start, 0, bytes_.size() - offset);
    if (!end) fail("unterminated string");
    return std::string(start, static_cast<const char*>(end));
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw Error("cubin of " + kernel_ + ": cannot read its resource usage: " + why);
  }

 private:
  const std::vector<char>& bytes_;
  const std::string& kernel_;
};

}  // namespace

ResourceUsage read_cubin_resources(const Cubin& cubin, const std::string& lowered_name) {
  ElfView elf(cubin.bytes, lowered_name);
  const auto sections = elf.sections();

  std::int64_t symbol = -1;
  for (const auto& section : sections) {
    if (section.type != kSectionSymtab || section.entry_size < 24) continue;
    if (section.link >= sections.size()) elf.fail("symbol table without a string table");
    const std::uint64_t strings = sections[section.link].offset;
    for (std::uint64_t i = 0; i < section.size / section.entry_size && symbol < 0; ++i)
      if (elf.string_at(strings + elf.read<std::uint32_t>(section.offset + i * section.entry_size)) ==
          lowered_name)
        symbol = static_cast<std::int64_t>(i);
  }
  if (symbol < 0) elf.fail("no symbol " + lowered_name);

  ResourceUsage usage;
  usage.stack_frame_bytes = 0;  // no EIATTR_FRAME_SIZE record: no frame
  for (const auto& section : sections) {
    if (section.name != ".nv.info") continue;
    for (std::uint64_t at = section.offset; at + 2 <= section.offset + section.size;) {
      const auto format = elf.read<std::uint8_t>(at), attribute = elf.read<std::uint8_t>(at + 1);
      if (format == kFormatNone) {
        at += 2;
      } else if (format == kFormatByte || format == kFormatHalf) {
        at += 4;
      } else if (format == kFormatSized) {
        const auto size = elf.read<std::uint16_t>(at + 2);
        if (size >= 8 && elf.read<std::uint32_t>(at + 4) == symbol) {
          const auto value = static_cast<int>(elf.read<std::uint32_t>(at + 8));
          if (attribute == kAttrRegCount) usage.registers = value;
          if (attribute == kAttrFrameSize) usage.stack_frame_bytes = value;
        }
        at += 4 + size;
      } else {
        elf.fail("unknown .nv.info record format " + std::to_string(format));
      }
    }
  }
  if (usage.registers < 0) elf.fail("no register count for " + lowered_name);
  return usage;
}

}  // namespace tilesmith
