#include "toml_prescan.hpp"

#include <algorithm>

namespace vfiod {

namespace {

// toml++ 3.3 parses a dotted key (`a.b.c = 1`, `[a.b.c]`, `[[a.b.c]]`) recursively, a few stack
// frames a component: 40,000 components, far under the size cap, overflow the stack and kill
// vfioctl and vfiod alike. No config needs more than three, so a key with more components than
// this is refused before toml++ sees the document.
constexpr unsigned kMaxKeyComponents = 64;
// Inline tables and arrays recurse too, and the two multiply: toml++'s own limit of 256 levels,
// each keyed with 64 components, needs 1-2 MB of stack. No config nests more than a few levels.
constexpr unsigned kMaxBrackets = 16;

}  // namespace

namespace {

bool bare(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

// One pass over the document, tracking the line and column (in characters) of what it reads,
// the dotted key being read and the brackets open.
class Prescan {
public:
    explicit Prescan(std::string_view t) : t_(t) {}

    std::optional<DeepSpot> run() {
        while (i_ < t_.size())
            if (auto spot = step())
                return spot;
        return std::nullopt;
    }

private:
    // Reads one token (a blank, a dot, a comment, a string, a bare key or a bracket).
    std::optional<DeepSpot> step() {
        const char c = t_[i_];
        const TextPosition start = pos_;
        if (c == ' ' || c == '\t') {
            advance(1);
        } else if (c == '.') {
            if (run_ == 0 || dot_)
                run_ = 0;
            dot_ = run_ > 0;
            advance(1);
        } else if (c == '#') {
            auto nl = t_.find('\n', i_);
            advance(nl == std::string_view::npos ? t_.size() : nl - i_);
            run_ = 0, dot_ = false;
        } else if (c == '"' || c == '\'') {
            skip_string(c);
            return component(start);
        } else if (bare(c)) {
            while (i_ < t_.size() && bare(t_[i_]))
                advance(1);
            return component(start);
        } else {
            return bracket(c, start);
        }
        return std::nullopt;
    }

    void advance(size_t n) {
        for (size_t end = std::min(t_.size(), i_ + n); i_ < end; ++i_) {
            unsigned char c = static_cast<unsigned char>(t_[i_]);
            if (c == '\n') {
                ++pos_.line;
                pos_.column = 1;
            } else if ((c & 0xc0) != 0x80) {
                ++pos_.column;
            }
        }
    }

    // A quoted key or value, from its opening quote `q` past its closing one.
    void skip_string(char q) {
        const std::string triple(3, q);
        const bool multi = t_.substr(i_, 3) == triple;
        const std::string close = multi ? triple : std::string(1, q);
        advance(close.size());
        while (i_ < t_.size() && t_.substr(i_, close.size()) != close) {
            if (q == '"' && t_[i_] == '\\')
                advance(2);  // basic strings: an escaped quote does not end them
            else if (!multi && t_[i_] == '\n')
                break;  // unterminated: toml++ reports it
            else
                advance(1);
        }
        // A multi-line string may end in up to two quotes of its own before the delimiter.
        while (multi && t_.substr(i_, 4) == std::string(4, q))
            advance(1);
        advance(close.size());
    }

    // A key component (or a value: a run of one) starting at `start`.
    std::optional<DeepSpot> component(TextPosition start) {
        if (!dot_) {
            run_ = 0;
            run_start_ = start;
        }
        dot_ = false;
        if (++run_ <= kMaxKeyComponents)
            return std::nullopt;
        return DeepSpot{run_start_,
                        "more than " + std::to_string(kMaxKeyComponents) + " dotted components"};
    }

    std::optional<DeepSpot> bracket(char c, TextPosition start) {
        if ((c == '[' || c == '{') && ++brackets_ > kMaxBrackets)
            return DeepSpot{start, "more than " + std::to_string(kMaxBrackets) +
                                       " levels of nested tables and arrays"};
        if ((c == ']' || c == '}') && brackets_ > 0)
            --brackets_;
        run_ = 0, dot_ = false;
        advance(1);
        return std::nullopt;
    }

    std::string_view t_;
    size_t i_ = 0;
    TextPosition pos_{1, 1}, run_start_{1, 1};
    size_t run_ = 0, brackets_ = 0;
    bool dot_ = false;  // the run ends in '.', waiting for its next component
};

}  // namespace

std::optional<DeepSpot> find_deep_key(std::string_view t) { return Prescan(t).run(); }

}  // namespace vfiod
