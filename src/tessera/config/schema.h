// The config schema: one table with an entry per key (name, type, default, allowed values, help
// text, group, and the Config member it fills). Defaults, parsing, type and range checks,
// `tessera help-config` and the resolved-config dump all read this table; nothing else lists keys.
//
// Also here: turning a YAML value into a member (with messages that name the key, the value,
// where it came from and what is allowed), formatting a member back into YAML text, and the
// closest-key suggestion for typos. File loading and precedence live in load.cc.
#pragma once

#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/config/config.h"

namespace tessera::config {

enum class FieldType { kBool, kInt, kFloat, kString, kChoice, kStringList, kAxisRules };

std::string_view field_type_name(FieldType t);  // "bool", "int", ..., as shown to users

// Allowed numeric values: an interval, plus optionally one special value outside it (MaxText's
// "-1 means automatic" convention), with what the special value means.
struct Range {
  double lo = -1e308;
  double hi = 1e308;
  bool lo_open = false;
  bool hi_open = false;
  std::optional<double> special;
  std::string_view special_meaning;

  bool unbounded() const { return lo <= -1e308 && hi >= 1e308 && !special; }
  bool contains(double v) const;
  std::string describe() const;  // e.g. "[0, 1)", ">= 1", "-1 (= steps) or >= 1"
};

using MemberPtr = std::variant<bool Config::*, int64_t Config::*, double Config::*, std::string Config::*,
                               std::vector<std::string> Config::*, std::vector<AxisRule> Config::*>;

struct FieldSpec {
  std::string_view name;
  FieldType type;
  MemberPtr member;
  std::string_view default_yaml;              // the default, as YAML text; parsed by the same code as files
  Range range;                                // kInt, kFloat
  std::vector<std::string_view> choices;      // kChoice: the values; kStringList: allowed elements
  std::vector<std::string_view> unsupported;  // kChoice: names MaxText accepts that Tessera does not
  std::string_view group;
  std::string_view help;
};

// The table, in display order (grouped).
const std::vector<FieldSpec>& schema();
// nullptr when there is no such key.
const FieldSpec* find_field(std::string_view name);
// The key closest to `name` by edit distance, or "" when none is close enough to be a likely typo.
std::string closest_key(std::string_view name);
// The candidate closest to `word`, or "" when none is close.
std::string closest_word(std::string_view word, const std::vector<std::string_view>& candidates);

// Where a value came from, for messages: "configs/base.yml:12" or "command line".
struct Origin {
  std::string where;
};

// Parses `node` as the value of `field` and stores it in cfg. Checks type, range and choices
// (values listed as unsupported are accepted here and rejected by finalize_config, so a later
// source can still replace them). Throws Error(kConfig).
void set_field(const FieldSpec& field, Config& cfg, const YAML::Node& node, const Origin& origin);

// Parses a command-line value for `field`: strings are taken verbatim (unless quoted), everything
// else is parsed as a YAML scalar or flow sequence. Throws Error(kConfig).
void set_field_from_text(const FieldSpec& field, Config& cfg, const std::string& text, const Origin& origin);

// The values a key takes, for help text: "[0, 1]", "adamw, sgd", ...; "" when any value of its
// type goes.
std::string describe_allowed(const FieldSpec& field);

// The member's value as YAML text (flow style for lists), e.g. `150001`, `3e-05`, `"runs"`,
// `["silu", "linear"]`. Parsing the text with set_field gives the same value back.
std::string format_value(const FieldSpec& field, const Config& cfg);

// A string as a YAML double-quoted scalar.
std::string yaml_quote(std::string_view s);

}  // namespace tessera::config
