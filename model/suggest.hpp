// "Did you mean ...?" for a mistyped name: a flag, a subcommand, a preset,
// an enum value. A user who types --microbatch or llama3-8B is one edit away
// from what they meant; listing every known name makes them search for it.
//
// Distance: optimal string alignment (Damerau 1964, Levenshtein 1966 with
// transpositions of adjacent characters; each insertion, deletion,
// substitution or transposition costs 1), compared without regard to case,
// so "llama3-8B" is 0 from "llama3-8b".
//
// Defines: edit_distance, nearest_name, did_you_mean, choice_words.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshplan {

// Edits (case-insensitive) that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, when it is close enough to be a typo of
// it: at most max(1, length / 3) edits and fewer than length (the length of
// the shorter of the two: "z" is no typo of "0"), or
// `word` (3 characters or more) is the start of exactly one candidate. The
// first of equally close candidates; nullopt when none is close, or `word`
// is itself a candidate.
std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& candidates);

// " (did you mean X?)" with the nearest candidate, or "" when none is close.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

// The names in a human-written list of choices: "fp32, bf16, fp16, fp8 (or
// auto)" -> fp32 bf16 fp16 fp8 auto. Inside parentheses only a word after
// "or" counts ("(v >= 2)" is a note); words with '<', '=' or '>' (templates
// such as "interleaved:<v>") are left out.
std::vector<std::string> choice_words(std::string_view list);

}  // namespace meshplan
