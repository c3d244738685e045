//! Strategic merge patch (`application/strategic-merge-patch+json`), as
//! `k8s.io/apimachinery/pkg/util/strategicpatch/patch.go` applies it on the server
//! (`StrategicMergeMapPatchUsingLookupPatchMeta` with `MergeParallelList` and
//! `IgnoreUnmatchedNulls`).

use serde_json::{Map, Value};

use super::error::PatchError;
use super::schema::{Field, Ty};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
/// Far deeper than any Kubernetes object; guards the recursion against hostile input.
const MAX_DEPTH: usize = 200;

/// Applies a strategic merge patch to `doc`, an object of the OpenAPI definition `definition`
/// (`io.k8s.api.apps.v1.Deployment`; `None` for objects without a schema, whose lists are then
/// all replaced).
///
/// Semantics, following upstream `mergeMap`/`mergeSlice`:
/// - maps merge recursively; `null` deletes a key (and is dropped when the key is absent);
/// - lists whose field has `patchStrategy: merge` merge: objects by their merge key (items of the
///   patch are merged into the live item with the same key, or appended), primitives as a set;
///   every other list is replaced by the patch's;
/// - the order of a merged list is the patch's for the items it names, the live order for the
///   rest, interleaved as upstream's `normalizeElementOrder` does;
/// - directives: `$patch: replace` (a map or a merged list is replaced), `$patch: delete` (a map
///   becomes empty; in a list, the item with that merge key is removed), `$retainKeys` (keys not
///   listed are cleared), `$deleteFromPrimitiveList/<field>` (removes values from a merged
///   primitive list), `$setElementOrder/<field>` (the final order of a merged list).
///
/// The patch must be a JSON object; the document an object (or `null`, treated as empty).
pub fn strategic_merge_patch(
    doc: &Value,
    patch: &Value,
    definition: Option<&str>,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::BadJsonDoc(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let original = match doc {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => {
            return Err(PatchError::BadJsonDoc(
                "the object to patch is not a JSON object".into(),
            ));
        }
    };
    let mut path = Vec::new();
    merge_map(original, patch.clone(), Ty::root(definition), &mut path).map(Value::Object)
}

/// Field path for messages: `spec.template.spec.containers[name=web]`.
fn show(path: &[String]) -> String {
    let joined: String = path.concat();
    match joined.strip_prefix('.') {
        Some(rest) => rest.to_string(),
        None if joined.is_empty() => "<root>".to_string(),
        None => joined,
    }
}

fn check_depth(path: &[String]) -> Result<(), PatchError> {
    if path.len() > MAX_DEPTH {
        return Err(PatchError::TooDeep { path: show(path) });
    }
    Ok(())
}

/// JSON type name, for messages.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Equality as upstream's Go `==` on decoded JSON: numbers compare by value (`80 == 80.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Upstream `extractKey`: `$setElementOrder/containers` → `containers`.
fn extract_key<'a>(key: &'a str, prefix: &str, path: &[String]) -> Result<&'a str, PatchError> {
    match key.split_once('/') {
        Some((head, rest)) if head == prefix => Ok(rest),
        _ if prefix == SET_ELEMENT_ORDER => Err(PatchError::BadSetElementOrderFormat {
            path: show(path),
            detail: String::new(),
        }),
        _ => Err(PatchError::BadPrimitiveListFormat { path: show(path) }),
    }
}

/// Upstream `mergeMap`: merges `patch` into `original`.
fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Ty,
    path: &mut Vec<String>,
) -> Result<Map<String, Value>, PatchError> {
    check_depth(path)?;
    // handleDirectiveInMergeMap
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                merge_map(Map::new(), patch, ty, path)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(PatchError::BadPatchType {
                path: show(path),
                directive: directive.to_string(),
                item: Value::Object(patch.clone()).to_string(),
            }),
        };
    }

    apply_retain_keys(&mut original, &mut patch, path)?;
    apply_set_element_order(&mut original, &mut patch, ty, path)?;

    for (key, patch_value) in patch {
        let (key, is_delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            (
                extract_key(&key, DELETE_FROM_PRIMITIVE_LIST, path)?.to_string(),
                true,
            )
        } else {
            (key, false)
        };
        if patch_value.is_null() {
            if !is_delete_list {
                original.remove(&key);
            }
            continue;
        }
        let field = ty.field(&key);
        path.push(format!(".{key}"));
        match original.get_mut(&key) {
            None => {
                let deletes_itself =
                    patch_value.get(DIRECTIVE).and_then(Value::as_str) == Some("delete");
                if !is_delete_list && !deletes_itself {
                    let value = fresh(patch_value, &field, path)?;
                    original.insert(key, value);
                }
            }
            Some(slot) => {
                let current = slot.take();
                *slot = merge_value(current, patch_value, &field, is_delete_list, path)?;
            }
        }
        path.pop();
    }
    Ok(original)
}

/// The value of one key present in both the live object and the patch.
fn merge_value(
    current: Value,
    patch: Value,
    field: &Field,
    is_delete_list: bool,
    path: &mut Vec<String>,
) -> Result<Value, PatchError> {
    if !same_kind(&current, &patch) {
        return if is_delete_list {
            Ok(current)
        } else {
            fresh(patch, field, path)
        };
    }
    match (current, patch) {
        (Value::Object(o), Value::Object(p)) => {
            if strategy_is(field, "replace") {
                merge_map(Map::new(), p, field.ty, path).map(Value::Object)
            } else {
                merge_map(o, p, field.ty, path).map(Value::Object)
            }
        }
        (Value::Array(o), Value::Array(p)) => {
            merge_list_field(o, p, field, is_delete_list, path).map(Value::Array)
        }
        (current, _) if is_delete_list => Ok(current),
        (_, p) => Ok(p),
    }
}

/// Whether the field's strategy, minus `retainKeys`, is `want` (upstream
/// `extractRetainKeysPatchStrategy`).
fn strategy_is(field: &Field, want: &str) -> bool {
    field
        .strategy
        .is_some_and(|s| s.strategy.split(',').any(|part| part == want))
}

/// A patch value for a key the live object lacks: taken as is, with directives applied and nulls
/// dropped (what upstream's decoder makes of them).
fn fresh(patch: Value, field: &Field, path: &mut Vec<String>) -> Result<Value, PatchError> {
    match patch {
        Value::Object(p) => merge_map(Map::new(), p, field.ty, path).map(Value::Object),
        Value::Array(p) => merge_list_field(Vec::new(), p, field, false, path).map(Value::Array),
        other => Ok(other),
    }
}

/// Upstream `mergeSliceHandler`: merge lists with `patchStrategy: merge`, replace the others.
fn merge_list_field(
    original: Vec<Value>,
    patch: Vec<Value>,
    field: &Field,
    is_delete_list: bool,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, PatchError> {
    if strategy_is(field, "merge") {
        let merge_key = field.strategy.and_then(|s| s.merge_key);
        return merge_slice(original, patch, field.ty, merge_key, is_delete_list, path);
    }
    if is_delete_list {
        // Upstream would store the deletion list itself here; removing the values is what the
        // client meant.
        return Ok(delete_from_slice(original, &patch));
    }
    patch
        .into_iter()
        .map(|item| match item {
            Value::Object(m) => merge_map(Map::new(), m, field.ty, path).map(Value::Object),
            other => Ok(other),
        })
        .collect()
}

/// Upstream `applyRetainKeysDirective`: clears the keys of `original` that `$retainKeys` does not
/// list, after checking the patch sets no key outside it.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    path: &[String],
) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(PatchError::BadRetainKeysFormat { path: show(path) });
    };
    let listed = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !listed(k) {
            return Err(PatchError::BadRetainKeysFormat { path: show(path) });
        }
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// Upstream `mergePatchIntoOriginal`: merges each list that has a `$setElementOrder/<field>` and
/// puts its items in that order (then live order for items the directive does not name).
fn apply_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    ty: Ty,
    path: &mut Vec<String>,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
        .cloned()
        .collect();
    for key in keys {
        let Some(order) = patch.remove(&key) else {
            continue;
        };
        let name = extract_key(&key, SET_ELEMENT_ORDER, path)?.to_string();
        path.push(format!(".{name}"));
        let bad = |detail: &str, path: &[String]| PatchError::BadSetElementOrderFormat {
            path: show(path),
            detail: format!(": {detail}"),
        };
        let Value::Array(order) = order else {
            return Err(bad("the directive is not a list", path));
        };
        let original_list = match original.get(&name) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(_) => return Err(bad("the live field is not a list", path)),
        };
        let patch_list = match patch.remove(&name) {
            None => None,
            Some(Value::Array(a)) => Some(a),
            Some(_) => return Err(bad("the patched field is not a list", path)),
        };
        let field = ty.field(&name);
        let merge_key = field.strategy.and_then(|s| s.merge_key);
        validate_order(patch_list.as_deref(), &order, merge_key, path)?;

        let merged = match (&original_list, patch_list.clone()) {
            (Some(o), None) => o.clone(),
            (original_list, Some(p)) => merge_list_field(
                original_list.clone().unwrap_or_default(),
                p,
                &field,
                false,
                path,
            )?,
            (None, None) => {
                path.pop();
                continue;
            }
        };
        let server_order = original_list.unwrap_or_default();
        let mut all_items = server_order.iter().chain(patch_list.iter().flatten());
        let is_map = match all_items.next() {
            None => {
                original.insert(name, Value::Array(merged));
                path.pop();
                continue;
            }
            Some(first) => first.is_object(),
        };
        let (in_order, server_only) = partition(merged, &order, merge_key, is_map, path)?;
        let normalized = normalize_element_order(
            in_order,
            server_only,
            &order,
            &server_order,
            merge_key,
            is_map,
            path,
        )?;
        original.insert(name, Value::Array(normalized));
        path.pop();
    }
    Ok(())
}

/// Upstream `validatePatchWithSetOrderList`: the patch list's items appear in the directive, in
/// the same relative order (items deleted with `$patch: delete` aside).
fn validate_order(
    patch_list: Option<&[Value]>,
    order: &[Value],
    merge_key: Option<&str>,
    path: &[String],
) -> Result<(), PatchError> {
    let Some(patch_list) = patch_list else {
        return Ok(());
    };
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let kept: Vec<&Value> = match merge_key {
        Some(_) => patch_list.iter().filter(|v| !is_delete_item(v)).collect(),
        None => patch_list.iter().collect(),
    };
    let (mut pi, mut si) = (0, 0);
    while let (Some(item), Some(wanted)) = (kept.get(pi), order.get(si)) {
        if item.get(DIRECTIVE).is_some() {
            pi += 1;
            continue;
        }
        if key_equal(item, wanted, merge_key, path)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < kept.len() {
        return Err(PatchError::BadSetElementOrderFormat {
            path: show(path),
            detail: ": the order in the patch list does not match the $setElementOrder list".into(),
        });
    }
    Ok(())
}

fn is_delete_item(v: &Value) -> bool {
    v.get(DIRECTIVE).and_then(Value::as_str) == Some("delete")
}

/// Upstream `mergeKeyValueEqual`.
fn key_equal(
    a: &Value,
    b: &Value,
    merge_key: Option<&str>,
    path: &[String],
) -> Result<bool, PatchError> {
    let Some(key) = merge_key else {
        return Ok(same(a, b));
    };
    Ok(same(key_of(a, key, path)?, key_of(b, key, path)?))
}

/// The merge-key value of a list item, which must be a map holding it.
fn key_of<'v>(item: &'v Value, key: &str, path: &[String]) -> Result<&'v Value, PatchError> {
    let Value::Object(m) = item else {
        return Err(PatchError::NotAMap {
            path: show(path),
            found: type_name(item),
        });
    };
    m.get(key).ok_or_else(|| PatchError::NoMergeKey {
        path: show(path),
        item: item.to_string(),
        key: key.to_string(),
    })
}

/// Upstream `mergeSlice`.
fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    ty: Ty,
    merge_key: Option<&str>,
    is_delete_list: bool,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, PatchError> {
    check_depth(path)?;
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let is_map = element_kind_is_map(&original, &patch, path)?;
    let (merged, patch, server_order) = if !is_map {
        if is_delete_list {
            return Ok(delete_from_slice(original, &patch));
        }
        let mut merged = original.clone();
        for item in &patch {
            if !merged.iter().any(|m| same(m, item)) {
                merged.push(item.clone());
            }
        }
        let mut deduped: Vec<Value> = Vec::with_capacity(merged.len());
        for item in merged {
            if !deduped.iter().any(|d| same(d, &item)) {
                deduped.push(item);
            }
        }
        (deduped, patch, original)
    } else {
        let Some(key) = merge_key else {
            return Err(PatchError::NoMergeKeyDeclared { path: show(path) });
        };
        let (original, patch) = split_special_elements(original, patch, key, ty, path)?;
        let merged = merge_keyed_items(original.clone(), &patch, key, ty, path)?;
        (merged, patch, original)
    };
    let key = if is_map { merge_key } else { None };
    let (in_patch, server_only) = partition(merged, &patch, key, is_map, path)?;
    normalize_element_order(
        in_patch,
        server_only,
        &patch,
        &server_order,
        key,
        is_map,
        path,
    )
}

/// Upstream `sliceElementType`: all items have one JSON type, and none is a list. Returns whether
/// that type is a map.
fn element_kind_is_map(
    original: &[Value],
    patch: &[Value],
    path: &[String],
) -> Result<bool, PatchError> {
    let mut first: Option<&Value> = None;
    for item in original.iter().chain(patch) {
        if item.is_array() {
            return Err(PatchError::ListOfLists { path: show(path) });
        }
        match first {
            None => first = Some(item),
            Some(f) if !same_kind(f, item) => {
                return Err(PatchError::MixedListElements { path: show(path) });
            }
            Some(_) => {}
        }
    }
    Ok(first.is_some_and(Value::is_object))
}

/// Upstream `mergeSliceWithSpecialElements`: applies `$patch: delete` items (removing live items
/// with their key) and `$patch: replace` (the rest of the patch list becomes the list). Returns
/// the live list to merge into and the patch items still to merge.
fn split_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
    ty: Ty,
    path: &mut Vec<String>,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut rest = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Value::Object(map) = item else {
            return Err(PatchError::NotAMap {
                path: show(path),
                found: type_name(&item),
            });
        };
        let Some(directive) = map.get(DIRECTIVE) else {
            rest.push(Value::Object(map));
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(wanted) = map.get(key) else {
                    return Err(PatchError::NoMergeKey {
                        path: show(path),
                        item: Value::Object(map.clone()).to_string(),
                        key: key.to_string(),
                    });
                };
                if let Some(live) = original.iter().find(|live| !live.is_object()) {
                    return Err(PatchError::NotAMap {
                        path: show(path),
                        found: type_name(live),
                    });
                }
                original.retain(|live| !live.get(key).is_some_and(|v| same(v, wanted)));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(PatchError::MergeDirectiveInList { path: show(path) });
            }
            _ => {
                return Err(PatchError::BadPatchType {
                    path: show(path),
                    directive: directive.to_string(),
                    item: Value::Object(map.clone()).to_string(),
                });
            }
        }
    }
    if replace {
        let replaced = rest
            .into_iter()
            .map(|item| match item {
                Value::Object(m) => merge_map(Map::new(), m, ty, path).map(Value::Object),
                other => Ok(other),
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok((replaced, Vec::new()));
    }
    Ok((original, rest))
}

/// Upstream `mergeSliceWithoutSpecialElements`: each patch item merges into the live item with
/// the same key, or is appended.
fn merge_keyed_items(
    mut original: Vec<Value>,
    patch: &[Value],
    key: &str,
    ty: Ty,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, PatchError> {
    for item in patch {
        let wanted = key_of(item, key, path)?;
        let Value::Object(patch_map) = item else {
            continue;
        };
        let mut found = None;
        for (i, live) in original.iter().enumerate() {
            let Value::Object(live_map) = live else {
                return Err(PatchError::NotAMap {
                    path: show(path),
                    found: type_name(live),
                });
            };
            if live_map.get(key).is_some_and(|v| same(v, wanted)) {
                found = Some(i);
                break;
            }
        }
        path.push(format!("[{key}={}]", display_key(wanted)));
        match found.and_then(|i| original.get_mut(i)) {
            Some(slot) => {
                let live = match slot.take() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                *slot = Value::Object(merge_map(live, patch_map.clone(), ty, path)?);
            }
            None => {
                let added = merge_map(Map::new(), patch_map.clone(), ty, path)?;
                original.push(Value::Object(added));
            }
        }
        path.pop();
    }
    Ok(original)
}

fn display_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Upstream `deleteFromSlice`.
fn delete_from_slice(current: Vec<Value>, to_delete: &[Value]) -> Vec<Value> {
    current
        .into_iter()
        .filter(|v| !to_delete.iter().any(|d| same(d, v)))
        .collect()
}

/// Upstream `partitionMapsByPresentInList`/`partitionPrimitivesByPresentInList`: the items of
/// `items` named by `by`, and the others.
fn partition(
    items: Vec<Value>,
    by: &[Value],
    merge_key: Option<&str>,
    is_map: bool,
    path: &[String],
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut named = Vec::new();
    let mut others = Vec::new();
    for item in items {
        let present = match merge_key.filter(|_| is_map) {
            Some(key) => {
                let wanted = key_of(&item, key, path)?;
                by.iter()
                    .any(|b| b.get(key).is_some_and(|v| same(v, wanted)))
            }
            None => by.iter().any(|b| same(b, &item)),
        };
        if present {
            named.push(item);
        } else {
            others.push(item);
        }
    }
    Ok((named, others))
}

/// Position of `item` in `list`, by merge key for maps.
fn index_in(list: &[Value], item: &Value, merge_key: Option<&str>, is_map: bool) -> Option<usize> {
    match merge_key.filter(|_| is_map) {
        Some(key) => {
            let wanted = item.get(key);
            list.iter().position(|v| match (v.get(key), wanted) {
                (Some(a), Some(b)) => same(a, b),
                (None, None) => true,
                _ => false,
            })
        }
        None => list.iter().position(|v| same(v, item)),
    }
}

/// Upstream `normalizeElementOrder`: sorts the patch items by `patch_order` and the server-only
/// items by `server_order`, then interleaves them (`mergeSortedSlice`).
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
    is_map: bool,
    path: &[String],
) -> Result<Vec<Value>, PatchError> {
    let patch_items = normalize_slice_order(patch_items, patch_order, merge_key, is_map, path)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, is_map, path)?;
    Ok(merge_sorted(
        server_only,
        patch_items,
        server_order,
        merge_key,
        is_map,
    ))
}

/// Upstream `normalizeSliceOrder`: a stable sort by position in `order` (items it lacks last),
/// with `$patch: delete` items moved to the end.
fn normalize_slice_order(
    items: Vec<Value>,
    order: &[Value],
    merge_key: Option<&str>,
    is_map: bool,
    path: &[String],
) -> Result<Vec<Value>, PatchError> {
    let mut to_delete = Vec::new();
    let mut kept = Vec::with_capacity(items.len());
    if let (Some(key), true) = (merge_key, is_map) {
        for item in items.iter().chain(order) {
            key_of(item, key, path)?;
        }
        for item in items {
            if is_delete_item(&item) {
                to_delete.push(item);
            } else {
                kept.push(item);
            }
        }
    } else {
        kept = items;
    }
    let mut keyed: Vec<(usize, Value)> = kept
        .into_iter()
        .map(|item| {
            (
                index_in(order, &item, merge_key, is_map).unwrap_or(usize::MAX),
                item,
            )
        })
        .collect();
    keyed.sort_by_key(|(i, _)| *i);
    let mut out: Vec<Value> = keyed.into_iter().map(|(_, v)| v).collect();
    out.extend(to_delete);
    Ok(out)
}

/// Upstream `mergeSortedSlice`: inserts the `left` items among the `right` ones, keeping the
/// relative order of each, placing a left item first only when both are in `server_order` and it
/// comes earlier there.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: Option<&str>,
    is_map: bool,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    index_in(server_order, l, merge_key, is_map),
                    index_in(server_order, r, merge_key, is_map),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        match next {
            Some(v) => out.push(v),
            None => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const POD: Option<&str> = Some("io.k8s.api.core.v1.Pod");
    const DEPLOYMENT: Option<&str> = Some("io.k8s.api.apps.v1.Deployment");

    fn pod(containers: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": containers}})
    }

    fn smp(doc: &Value, patch: &Value, def: Option<&str>) -> Value {
        match strategic_merge_patch(doc, patch, def) {
            Ok(v) => v,
            Err(e) => panic!("patch failed: {e}"),
        }
    }

    #[test]
    fn smp_merges_containers_by_name() {
        let doc = pod(json!([
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80}]},
            {"name": "side", "image": "busybox"}
        ]));
        let patch = json!({"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/spec/containers"),
            Some(&json!([
                {"name": "web", "image": "nginx:2", "ports": [{"containerPort": 80}]},
                {"name": "side", "image": "busybox"}
            ]))
        );
    }

    #[test]
    fn smp_appends_new_keyed_items_and_merges_nested_lists() {
        let doc = pod(json!([{"name": "web", "image": "a",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]));
        let patch = json!({"spec": {"containers": [
            {"name": "web", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
            {"name": "new", "image": "b"}
        ]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/spec/containers"),
            Some(&json!([
                {"name": "web", "image": "a", "env": [
                    {"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
                {"name": "new", "image": "b"}
            ]))
        );
    }

    #[test]
    fn smp_null_deletes_a_label() {
        let doc = json!({"metadata": {"labels": {"app": "web", "tier": "fe"}}});
        let patch = json!({"metadata": {"labels": {"tier": null, "absent": null, "new": "x"}}});
        assert_eq!(
            smp(&doc, &patch, POD),
            json!({"metadata": {"labels": {"app": "web", "new": "x"}}})
        );
    }

    #[test]
    fn smp_patch_delete_directive_removes_list_item() {
        let doc = pod(json!([{"name": "web", "image": "a"}, {"name": "side", "image": "b"}]));
        let patch = json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/spec/containers"),
            Some(&json!([{"name": "web", "image": "a"}]))
        );
    }

    #[test]
    fn smp_patch_replace_directive_replaces_list_and_map() {
        let doc = pod(json!([{"name": "web", "image": "a"}, {"name": "side", "image": "b"}]));
        let patch = json!({"spec": {"containers": [{"name": "only", "image": "c"}, {"$patch": "replace"}]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/spec/containers"),
            Some(&json!([{"name": "only", "image": "c"}]))
        );
        let doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}});
        assert_eq!(
            smp(&doc, &patch, POD),
            json!({"metadata": {"labels": {"c": "3"}}})
        );
        let patch = json!({"metadata": {"labels": {"$patch": "delete"}}});
        assert_eq!(smp(&doc, &patch, POD), json!({"metadata": {"labels": {}}}));
    }

    #[test]
    fn smp_replaces_lists_without_strategy() {
        let doc = json!({"spec": {"containers": [{"name": "web", "args": ["a", "b"]}],
                         "tolerations": [{"key": "x"}]}});
        let patch = json!({"spec": {"containers": [{"name": "web", "args": ["c"]}],
                           "tolerations": [{"key": "y"}]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(out.pointer("/spec/containers/0/args"), Some(&json!(["c"])));
        assert_eq!(
            out.pointer("/spec/tolerations"),
            Some(&json!([{"key": "y"}]))
        );
    }

    #[test]
    fn smp_without_definition_replaces_every_list() {
        let doc = json!({"spec": {"containers": [{"name": "a"}]}, "m": {"x": 1}});
        let patch = json!({"spec": {"containers": [{"name": "b"}]}, "m": {"y": 2}});
        assert_eq!(
            smp(&doc, &patch, None),
            json!({"spec": {"containers": [{"name": "b"}]}, "m": {"x": 1, "y": 2}})
        );
    }

    #[test]
    fn smp_merges_primitive_lists_as_sets_and_deletes_from_them() {
        let doc = json!({"metadata": {"finalizers": ["a", "b"]}});
        let patch = json!({"metadata": {"finalizers": ["c", "a"]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/metadata/finalizers"),
            Some(&json!(["c", "a", "b"]))
        );
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(out.pointer("/metadata/finalizers"), Some(&json!(["b"])));
    }

    #[test]
    fn smp_set_element_order_reorders() {
        let doc = pod(
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}, {"name": "c", "image": "3"}]),
        );
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "9"}]
        }});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/spec/containers"),
            Some(
                &json!([{"name": "c", "image": "3"}, {"name": "a", "image": "9"}, {"name": "b", "image": "2"}])
            )
        );
        let doc = json!({"metadata": {"finalizers": ["x", "y", "z"]}});
        let patch = json!({"metadata": {"$setElementOrder/finalizers": ["z", "y", "x"]}});
        let out = smp(&doc, &patch, POD);
        assert_eq!(
            out.pointer("/metadata/finalizers"),
            Some(&json!(["z", "y", "x"]))
        );
    }

    #[test]
    fn smp_set_element_order_that_contradicts_the_patch_is_rejected() {
        let doc = pod(json!([{"name": "a"}, {"name": "b"}]));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "b"}, {"name": "a"}]
        }});
        let err = strategic_merge_patch(&doc, &patch, POD).err();
        assert!(matches!(
            err,
            Some(PatchError::BadSetElementOrderFormat { .. })
        ));
    }

    #[test]
    fn smp_retain_keys_clears_unlisted_keys() {
        let doc = json!({"spec": {"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = smp(&doc, &patch, DEPLOYMENT);
        assert_eq!(
            out.pointer("/spec/strategy"),
            Some(&json!({"type": "Recreate"}))
        );
        let bad = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}});
        let err = strategic_merge_patch(&doc, &bad, DEPLOYMENT).err();
        assert!(matches!(err, Some(PatchError::BadRetainKeysFormat { .. })));
    }

    #[test]
    fn smp_deployment_template_containers_merge_through_the_type_graph() {
        let doc = json!({"spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "web", "image": "a", "volumeMounts": [{"mountPath": "/x", "name": "v"}]}
        ]}}}});
        let patch = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "web", "volumeMounts": [{"mountPath": "/y", "name": "w"}]}
        ]}}}});
        let out = smp(&doc, &patch, DEPLOYMENT);
        assert_eq!(out.pointer("/spec/replicas"), Some(&json!(3)));
        // Without `$setElementOrder`, upstream's mergeSortedSlice puts patch items it cannot
        // place relative to live ones first.
        assert_eq!(
            out.pointer("/spec/template/spec/containers/0/volumeMounts"),
            Some(&json!([{"mountPath": "/y", "name": "w"}, {"mountPath": "/x", "name": "v"}]))
        );
    }

    #[test]
    fn smp_errors_name_the_field() {
        let doc = pod(json!([{"name": "web"}]));
        let cases = [
            (
                json!({"spec": {"containers": [{"image": "x"}]}}),
                "spec.containers: map: {\"image\":\"x\"} does not contain declared merge key: name",
            ),
            (
                json!({"spec": {"containers": [{"name": "web", "$patch": "merge"}]}}),
                "spec.containers: merging lists cannot yet be specified in the patch",
            ),
            (
                json!({"metadata": {"labels": {"$patch": "bogus"}}}),
                "metadata.labels: unknown patch type: \"bogus\" in map: {\"$patch\":\"bogus\"}",
            ),
            (
                json!({"metadata": {"finalizers": [["a"]]}}),
                "metadata.finalizers: lists of lists are not supported",
            ),
        ];
        let doc = {
            let mut d = doc;
            if let Some(m) = d.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                m.insert("finalizers".into(), json!(["f"]));
                m.insert("labels".into(), json!({"a": "b"}));
            }
            d
        };
        for (patch, want) in cases {
            let err = strategic_merge_patch(&doc, &patch, POD).err();
            assert_eq!(err.map(|e| e.to_string()).as_deref(), Some(want), "{patch}");
        }
    }

    #[test]
    fn smp_rejects_non_object_patches() {
        for patch in [json!([]), json!(1), json!(null), json!("x")] {
            assert!(strategic_merge_patch(&json!({}), &patch, POD).is_err());
        }
    }
}
