//! Weighing a pattern: what the regex engine will build for it, built within what is
//! left of the spec's allowance, and the case folding its classes ask for.

use fancy_regex::Expr;
use regex_automata::nfa::thompson;

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
    use regex_syntax::hir::{Class, HirKind};
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
/// size (true) or for anything else (false). Each build stops at what is left.
fn nfa_bytes(text: &str, limit: usize) -> Result<usize, bool> {
    let forward = thompson_bytes(text, false, limit)?;
    let reverse = thompson_bytes(text, true, limit - forward)?;
    Ok(forward + reverse)
}

fn thompson_bytes(text: &str, reverse: bool, limit: usize) -> Result<usize, bool> {
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
        .build(text)
        .map(|nfa| nfa.memory_usage())
        .map_err(|e| e.size_limit().is_some())
}
