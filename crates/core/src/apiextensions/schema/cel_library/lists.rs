//! The Kubernetes list library (upstream `library/lists.go`): `isSorted()`, `sum()`, `min()`,
//! `max()`, `indexOf(x)` and `lastIndexOf(x)` on lists. The `cel` crate's `lists` extension
//! already provides `slice`, `flatten`, `distinct`, `reverse`, `sort`, `sortBy` and
//! `lists.range`.

use std::cmp::Ordering;

use cel::common::types::{CelInt, DYN_TYPE, LIST_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::{boolean, error, int, take};
use crate::apiextensions::schema::cel_cost;

pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        last_index_of,
    )?;
    Ok(())
}

/// The elements of `list`, charging one unit per element read.
fn elements<'b, 'v>(list: &'b (dyn Val + 'v)) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = list
        .as_iterable()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: list.get_type().name().to_string(),
            want: "list".to_string(),
        })?;
    let mut it = iterable.iter();
    let mut out = Vec::new();
    while let Some(v) = it.next() {
        out.push(v);
    }
    cel_cost::charge(1 + out.len() as u64)?;
    Ok(out)
}

fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    if a.get_type() != b.get_type() {
        return Err(error(function, "list elements must have the same type"));
    }
    a.as_comparer()
        .ok_or_else(|| error(function, "list elements must be comparable"))?
        .compare(b)
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(list.as_ref())?;
    for pair in items.windows(2) {
        if compare("isSorted", pair[0], pair[1])? == Ordering::Greater {
            return Ok(boolean(false));
        }
    }
    Ok(boolean(true))
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(list.as_ref())?;
    let Some((first, rest)) = items.split_first() else {
        // upstream: the sum of an empty list is the zero of its element type; untyped, int.
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut total: Box<dyn Val + 'v> = first.clone_as_boxed();
    for item in rest {
        let next = total
            .as_adder()
            .ok_or_else(|| error("sum", "list elements must be summable"))?
            .add(*item)?
            .into_owned();
        total = next;
    }
    Ok(CowVal::Owned(total))
}

fn extreme<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
    function: &str,
    keep: Ordering,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list] = take(args)?;
    let items = elements(list.as_ref())?;
    let Some((first, rest)) = items.split_first() else {
        return Err(error(function, format!("{function} called on empty list")));
    };
    let mut best = *first;
    for item in rest {
        if compare(function, *item, best)? == keep {
            best = *item;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "min", Ordering::Less)
}

fn max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    extreme(args, "max", Ordering::Greater)
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, x] = take(args)?;
    let items = elements(list.as_ref())?;
    let found = items.iter().position(|i| i.equals(x.as_ref()));
    Ok(int(found.map_or(-1, |i| i as i64)))
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [list, x] = take(args)?;
    let items = elements(list.as_ref())?;
    let found = items.iter().rposition(|i| i.equals(x.as_ref()));
    Ok(int(found.map_or(-1, |i| i as i64)))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{assert_error, assert_true};

    // Cases from upstream `library/lists_test.go`.
    #[test]
    fn is_sorted_compares_neighbours() {
        assert_true("[].isSorted()");
        assert_true("[1, 2, 3].isSorted()");
        assert_true("[1, 1, 2].isSorted()");
        assert_true("![3, 2, 1].isSorted()");
        assert_true("['a', 'b', 'c'].isSorted()");
        assert_true("![2.0, 1.0].isSorted()");
        assert_error("[1, 'a'].isSorted()", "same type");
    }

    #[test]
    fn sum_adds_elements_of_one_type() {
        assert_true("[].sum() == 0");
        assert_true("[1, 2, 3].sum() == 6");
        assert_true("[1u, 2u].sum() == 3u");
        assert_true("[1.5, 2.5].sum() == 4.0");
    }

    #[test]
    fn min_and_max_fail_on_empty_lists() {
        assert_true("[3, 1, 2].min() == 1");
        assert_true("[3, 1, 2].max() == 3");
        assert_true("['b', 'a'].min() == 'a'");
        assert_error("[].min()", "min called on empty list");
        assert_error("[].max()", "max called on empty list");
    }

    #[test]
    fn index_of_finds_first_and_last() {
        assert_true("[1, 2, 2, 3].indexOf(2) == 1");
        assert_true("[1, 2, 2, 3].lastIndexOf(2) == 2");
        assert_true("['a', 'b'].indexOf('c') == -1");
        assert_true("[].lastIndexOf(1) == -1");
        assert_true("[[1], [2]].indexOf([2]) == 1");
    }
}
