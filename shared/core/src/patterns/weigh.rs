//! Weighing a pattern: what the regex engine will build for it, built within what is
//! left of the spec's allowance, and the case folding its classes ask for.

use fancy_regex::Expr;
use regex_automata::nfa::thompson;
use regex_syntax::hir::{Class, Hir, HirKind};

use crate::guard;

/// What weighing a pattern found: the bytes it spent, and whether the weighing itself
/// built everything the regex engine will build for it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Weighed {
    pub(super) bytes: usize,
    /// False when the regex engine takes the pattern whole (no lookaround, no
    /// backreference: fancy-regex hands it to regex-automata as it is) and weighing
    /// built both automata regex-automata builds for it, each within its limit: that
    /// proves it compiles, and compiling it again would double the cost for nothing.
    pub(super) compile: bool,
}

/// Bytes of automaton `text` compiles to, if at most `limit`, and whether it still has
/// to be compiled. A pattern the regex engine takes whole is weighed as regex-automata
/// builds it: the forward NFA (with captures) and the reverse NFA beside it (the lazy
/// DFA's; for a class such as `[\u{10000}-\u{1000F}\u{10080}-\u{1008F}…]` it is five
/// times the forward one). Anything else (lookaround, backreferences) is weighed by the
/// parts fancy-regex hands to regex-automata, counted twice: it is compiled afterwards,
/// which builds those parts again.
pub(super) fn weigh(text: &str, limit: usize) -> Option<Weighed> {
    let Ok(tree) = Expr::parse_tree(text) else {
        // A pattern that does not parse weighs nothing and is refused when compiled.
        return Some(Weighed {
            bytes: 0,
            compile: true,
        });
    };
    if delegated(&tree.expr, true) {
        match nfa_bytes(text, limit) {
            Ok(bytes) => {
                return Some(Weighed {
                    bytes,
                    compile: false,
                });
            }
            Err(true) => return None,
            // regex-syntax refuses what fancy-regex read: the compile says why.
            Err(false) => {}
        }
    }
    let mut total = 0;
    weigh_parts(&tree.expr, limit, &mut total).then_some(Weighed {
        bytes: total,
        compile: true,
    })
}

/// Whether fancy-regex hands all of `e` to regex-automata as one regex: only the
/// constructs regex-syntax reads itself (no lookaround, backreference, atomic group,
/// conditional, `\K`, `\G`, `\Z`, half word boundaries). Conservative: whatever is not
/// listed is compiled. With `anchors` false, anchors and word boundaries are not taken
/// either: a part is rendered with `Expr::to_str`, which panics on what the regex engine
/// cannot run (and this build aborts on panics), and they weigh nothing.
fn delegated(e: &Expr, anchors: bool) -> bool {
    use fancy_regex::Assertion as A;
    match e {
        Expr::Empty | Expr::Any { .. } | Expr::Literal { .. } | Expr::Delegate { .. } => true,
        Expr::Assertion(
            A::StartText
            | A::EndText
            | A::StartLine { .. }
            | A::EndLine { .. }
            | A::WordBoundary
            | A::NotWordBoundary,
        ) => anchors,
        Expr::Concat(v) | Expr::Alt(v) => v.iter().all(|c| delegated(c, anchors)),
        Expr::Group(c) => delegated(c, anchors),
        Expr::Repeat { child, .. } => delegated(child, anchors),
        _ => false,
    }
}

/// Adds twice the weight of every part of `e` the regex engine would compile to
/// `total` (weighed now, built again by the compile); false once `total` passes `limit`.
fn weigh_parts(e: &Expr, limit: usize, total: &mut usize) -> bool {
    if delegated(e, false) {
        let mut text = String::new();
        e.to_str(&mut text, 0);
        return match nfa_bytes(&text, (limit - *total) / 2) {
            Ok(bytes) => {
                *total += 2 * bytes;
                true
            }
            Err(over) => !over,
        };
    }
    guard::children(e)
        .into_iter()
        .all(|c| weigh_parts(c, limit, total))
}

/// Code points the regex parser will case-fold to compile `text`: every bracketed class
/// under the `i` flag folds its items (nested classes included, before its own
/// negation, and each side of a set operation), and so does a `\p{..}` class (before
/// its `\P` negation). Counted on fancy-regex's syntax tree, whose classes are the
/// pieces handed to the regex parser (with the `i` flag resolved), each read as syntax
/// only, with its coverage taken from its translation without folding: microseconds.
/// Text that does not parse folds nothing here.
pub(super) fn fold_weight(text: &str) -> usize {
    fn in_tree(e: &Expr) -> usize {
        match e {
            Expr::Delegate { inner, casei: true } => {
                match regex_syntax::ast::parse::Parser::new().parse(inner) {
                    Ok(ast) => folds_in(&ast, &mut true),
                    Err(_) => 0,
                }
            }
            other => guard::children(other).into_iter().map(in_tree).sum(),
        }
    }
    Expr::parse_tree(text).map_or(0, |tree| in_tree(&tree.expr))
}

fn folds_in(ast: &regex_syntax::ast::Ast, casei: &mut bool) -> usize {
    use regex_syntax::ast::{Ast, Flag, GroupKind};
    match ast {
        // Flags set inside a group hold to its end, across alternatives.
        Ast::Flags(set) => {
            if let Some(on) = set.flags.flag_state(Flag::CaseInsensitive) {
                *casei = on;
            }
            0
        }
        Ast::Group(g) => {
            let mut inner = *casei;
            if let GroupKind::NonCapturing(flags) = &g.kind
                && let Some(on) = flags.flag_state(Flag::CaseInsensitive)
            {
                inner = on;
            }
            folds_in(&g.ast, &mut inner)
        }
        Ast::Concat(c) => c.asts.iter().map(|a| folds_in(a, casei)).sum(),
        Ast::Alternation(a) => a.asts.iter().map(|a| folds_in(a, casei)).sum(),
        Ast::Repetition(r) => folds_in(&r.ast, casei),
        Ast::ClassBracketed(b) if *casei => bracket_folds(b),
        Ast::ClassUnicode(u) if *casei => {
            let mut plain = (**u).clone();
            plain.negated = false;
            coverage(&Ast::class_unicode(plain))
        }
        _ => 0,
    }
}

/// A bracketed class folds its items, each nested class folds its own, and each side
/// of a set operation (`&&`, `--`, `~~`) is folded before the operation.
fn bracket_folds(b: &regex_syntax::ast::ClassBracketed) -> usize {
    use regex_syntax::ast::{Ast, ClassBracketed, ClassSet, ClassSetItem};
    fn side(set: &ClassSet, span: regex_syntax::ast::Span) -> usize {
        coverage(&Ast::class_bracketed(ClassBracketed {
            span,
            negated: false,
            kind: set.clone(),
        }))
    }
    fn nested(set: &ClassSet) -> usize {
        match set {
            ClassSet::BinaryOp(op) => {
                side(&op.lhs, op.span) + side(&op.rhs, op.span) + nested(&op.lhs) + nested(&op.rhs)
            }
            ClassSet::Item(ClassSetItem::Bracketed(inner)) => bracket_folds(inner),
            ClassSet::Item(ClassSetItem::Union(u)) => u
                .items
                .iter()
                .map(|item| match item {
                    ClassSetItem::Bracketed(inner) => bracket_folds(inner),
                    _ => 0,
                })
                .sum(),
            ClassSet::Item(_) => 0,
        }
    }
    let mut items = b.clone();
    items.negated = false;
    coverage(&Ast::class_bracketed(items)) + nested(&b.kind)
}

/// Code points a class covers, from its translation without folding.
fn coverage(class: &regex_syntax::ast::Ast) -> usize {
    match regex_syntax::Parser::new().parse(&class.to_string()) {
        Ok(hir) => match hir.kind() {
            HirKind::Class(Class::Unicode(c)) => c
                .ranges()
                .iter()
                .map(|r| r.end() as usize - r.start() as usize + 1)
                .sum(),
            HirKind::Literal(_) => 1,
            _ => 0,
        },
        Err(_) => 0,
    }
}

/// The sizes of the two Thompson NFAs regex-automata builds for `text` (forward with
/// captures, reverse without), together, or whether building them failed for their
/// size (true) or for anything else (false). Each build stops at what is left, and
/// neither starts when the repeated parts alone are known to need more
/// ([`repeated_lower_bound`]): a counted repetition of a large class is refused in
/// microseconds rather than built copy by copy up to the limit.
fn nfa_bytes(text: &str, limit: usize) -> Result<usize, bool> {
    // Parsed as regex-automata's compiler parses it (a default parser).
    let hir = regex_syntax::ParserBuilder::new()
        .build()
        .parse(text)
        .map_err(|_| false)?;
    // With a tenth off: the copies of a class are built alike but not identically
    // (regex-automata's UTF-8 caches are direct-mapped on state ids, so what one copy
    // shares depends on where it sits), so a spec just under its allowance is never
    // refused on the bound alone.
    // The bound's own sum stops a quarter past the limit, where a tenth off still
    // passes it.
    let bound = repeated_lower_bound(&hir, limit.saturating_add(limit / 4));
    if bound - bound / 10 > limit {
        return Err(true);
    }
    let forward = thompson_bytes(&hir, false, limit)?;
    let reverse = thompson_bytes(&hir, true, limit - forward)?;
    Ok(forward + reverse)
}

fn thompson_bytes(hir: &Hir, reverse: bool, limit: usize) -> Result<usize, bool> {
    let captures = if reverse {
        thompson::WhichCaptures::None
    } else {
        thompson::WhichCaptures::All
    };
    thompson::Compiler::new()
        .configure(
            thompson::Config::new()
                .nfa_size_limit(Some(limit))
                .shrink(false)
                .reverse(reverse)
                .which_captures(captures),
        )
        .build_from_hir(hir)
        .map(|nfa| nfa.memory_usage())
        .map_err(|e| e.size_limit().is_some())
}

/// Copies of a part that repetitions compile before a class is measured for the lower
/// bound: measuring builds the class once more in each direction, at most a quarter of
/// what its copies cost to build.
const MEASURED_COPIES: u64 = 4;

/// A lower bound on the bytes of `hir`'s two NFAs (forward and reverse, as
/// [`nfa_bytes`] builds them), counting only classes that repetitions compile at least
/// [`MEASURED_COPIES`] times; more than `limit` means "more than `limit`", whatever the
/// exact figure. regex-automata compiles `x{n,m}` as `m` copies of `x` (`n` for `x{n}`,
/// `max(n, 1)` for `x{n,}`), each copy of a class built afresh (its UTF-8 caches are
/// cleared per class): so a class's copies weigh about `copies` times the class built
/// alone, less what an empty pattern's NFA weighs (about: the caches are direct-mapped
/// on state ids, so sharing varies a little with position; [`nfa_bytes`] takes a tenth
/// off before refusing on it).
pub(super) fn repeated_lower_bound(hir: &Hir, limit: usize) -> usize {
    let mut measured = Vec::new();
    let bound = lower_bound(hir, 1, limit as u64, &mut measured);
    usize::try_from(bound).unwrap_or(usize::MAX)
}

fn lower_bound(hir: &Hir, copies: u64, limit: u64, measured: &mut Vec<(Class, u64)>) -> u64 {
    match hir.kind() {
        HirKind::Class(class) if copies >= MEASURED_COPIES => {
            copies.saturating_mul(class_bytes(class, limit, measured))
        }
        HirKind::Repetition(rep) => {
            let compiled = match rep.max {
                Some(max) => max,
                None => rep.min.max(1),
            };
            let copies = copies.saturating_mul(u64::from(compiled));
            lower_bound(&rep.sub, copies, limit, measured)
        }
        HirKind::Capture(cap) => lower_bound(&cap.sub, copies, limit, measured),
        HirKind::Concat(parts) | HirKind::Alternation(parts) => {
            let mut sum = 0u64;
            for part in parts {
                sum = sum.saturating_add(lower_bound(part, copies, limit, measured));
                if sum > limit {
                    break;
                }
            }
            sum
        }
        _ => 0,
    }
}

/// The bytes one copy of `class` adds to the two NFAs: each built alone, less an empty
/// pattern's; more than `limit` if a build passes it. Measured once per class.
fn class_bytes(class: &Class, limit: u64, measured: &mut Vec<(Class, u64)>) -> u64 {
    if let Some((_, bytes)) = measured.iter().find(|(c, _)| c == class) {
        return *bytes;
    }
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    let alone = Hir::class(class.clone());
    let empty = Hir::empty();
    let mut bytes = 0u64;
    for reverse in [false, true] {
        let built = |h: &Hir| thompson_bytes(h, reverse, cap.saturating_add(1));
        bytes += match (built(&alone), built(&empty)) {
            (Ok(a), Ok(e)) => a.saturating_sub(e) as u64,
            // Passed the limit alone: one copy is already too much.
            (Err(true), _) => limit.saturating_add(1),
            _ => 0,
        };
    }
    measured.push((class.clone(), bytes));
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::patterns::SPEC_REGEX_BYTES;

    fn parse(text: &str) -> Hir {
        regex_syntax::ParserBuilder::new()
            .build()
            .parse(text)
            .expect("parses")
    }

    fn built(hir: &Hir) -> usize {
        thompson_bytes(hir, false, usize::MAX).expect("forward")
            + thompson_bytes(hir, true, usize::MAX).expect("reverse")
    }

    /// The bound refuses without building only what building would refuse: for
    /// repetitions of every shape the compiler has (bounded, exact, at least n, nested,
    /// in alternations, of Unicode, ASCII and byte classes, folded or not), it never
    /// exceeds the bytes actually built. Would catch: a bound counting copies the
    /// compiler does not make, or a class measured larger alone than in place (a spec
    /// that compiles within its allowance refused as too large).
    #[test]
    fn the_repeated_lower_bound_never_exceeds_what_is_built() {
        for text in [
            r"\w{1,64}",
            r"^\w{1,64}0$",
            r"(?i)[\p{L}\p{N}\w]{20}x",
            r"(\w{3}){5}",
            r"[a-z]{10}",
            r"(?:\pL|\d){7,9}",
            r"(?:\w+){4}",
            r"\p{Greek}{2,}",
            r"\p{Greek}{6,}",
            r"(?s:.){30}",
            r"[^a]{12}",
            r"(?-u:\w){40}",
            r"(?-u:[a-f\d]){40}",
            r"(?:ab|cd){9}",
            r"(?:\w|\s){5}x{8}",
            r"[\u{10000}-\u{1000F}\u{10080}-\u{1008F}]{6}",
            r"(?i)(?:k\w){4}",
            r"\W{0,5}",
            r"\d{4}-\d{2}-\d{2}",
            r"(?:\w{2}|\d{3}){4,}",
        ] {
            let hir = parse(text);
            let (bound, built) = (repeated_lower_bound(&hir, usize::MAX), built(&hir));
            assert!(bound <= built, "{text}: bound {bound} > built {built}");
        }
    }

    /// The costly hostile patterns of `tests/hostile_input.rs` are refused by the bound,
    /// before anything is built copy by copy, and the bound is close to the truth.
    /// Would catch: the bound no longer reaching them (each built up to the spec's
    /// allowance again: tens of ms of CPU before payment).
    #[test]
    fn counted_repetitions_of_large_classes_are_refused_unbuilt() {
        for text in [r"(?i)[\p{L}\p{N}\w]{900}x", r"^\w{1,64}0$"] {
            let hir = parse(text);
            let bound = repeated_lower_bound(&hir, usize::MAX);
            assert!(bound - bound / 10 > SPEC_REGEX_BYTES, "{text}: {bound}");
            assert_eq!(nfa_bytes(text, SPEC_REGEX_BYTES), Err(true), "{text}");
        }
        let hir = parse(r"\w{1,20}");
        let (bound, built) = (repeated_lower_bound(&hir, usize::MAX), built(&hir));
        assert!(bound * 10 >= built * 9, "bound {bound}, built {built}");
    }
}
