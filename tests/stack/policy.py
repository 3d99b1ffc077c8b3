"""IAM policy evaluation, as AWS documents it, for one account.

Pure functions, no moto: `evaluate(check, caller, identity_policies,
resource_policy)` answers one authorization question (action, resource,
request context) the way AWS's policy evaluation logic does for a principal
and a resource in the same account:

1. an explicit Deny in any applicable statement (identity-based or
   resource-based) wins;
2. else an Allow in an identity-based policy, or in the resource-based
   policy for this principal, allows;
3. else the request is implicitly denied.

Statements: Effect, Action/NotAction (case-insensitive, `*` and `?`),
Resource/NotResource (case-sensitive, `*` and `?`; `*` may span `:` and
`/`), Principal/NotPrincipal (resource-based policies), Condition with the
operators listed in `_OPERATORS`, the `ForAnyValue:`/`ForAllValues:` set
qualifiers and the `...IfExists` suffix. Missing condition keys follow the
IAM User Guide ("Condition operators", "Single-valued vs. multivalued
context keys"):

- a plain operator whose key is missing is false, except the negated ones
  (`StringNotEquals`, `StringNotLike`, `ArnNotEquals`, `ArnNotLike`,
  `NumericNotEquals`, `NotIpAddress`, ...), which are true;
- `...IfExists` is true when the key is missing;
- `ForAnyValue:` is false, `ForAllValues:` true, for a missing or empty key;
- `Null: {key: "true"}` is true exactly when the key is missing.

Policy variables (`${aws:username}`, `${aws:PrincipalTag/x}`, `${*}`, ...)
are substituted in Resource/NotResource and condition values from the
request context.

Simplifications (each one is safe for the template this harness judges;
say so in the README of account.py if that changes):

- No service control policies, permissions boundaries, session policies or
  resource control policies (the template uses none).
- A plain (unqualified) operator on a multivalued key (e.g.
  `StringEquals` on `dynamodb:LeadingKeys`) is true if any value matches;
  its negated form is true if no value matches. AWS's policy validator
  warns against writing such conditions at all.
- Resource-based policies: `Principal: "*"`, `{"AWS": "*"}`, the caller's
  role ARN, session ARN or user ARN match the caller. A principal naming
  the caller's own account (`123456789012`, `arn:aws:iam::123456789012:root`)
  matches for Deny statements only: in the same account such an Allow only
  delegates to the identity policies, it grants nothing by itself.
  Service principals never match (the harness's callers are roles and
  users, never services).
- Date* operators are not implemented (an unknown operator makes its
  statement not apply, and is reported in the decision's `note`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any


@dataclass
class Check:
    """One authorization question AWS asks for a request."""

    action: str  # "dynamodb:GetItem"
    resource: str  # an ARN, or "*" for actions without resource-level permissions
    context: dict[str, list[str]] = field(default_factory=dict)  # condition keys (any case)
    resource_policy: list[dict[str, Any]] | None = None  # statements of the resource's own policy
    resource_policy_name: str = ""
    fallback: bool = False  # True: derived by moto's action name with resource "*"
    note: str = ""

    def ctx(self) -> dict[str, list[str]]:
        return {k.lower(): v for k, v in self.context.items()}


@dataclass
class Caller:
    kind: str  # "user" | "role"
    name: str  # user name, or role name for assumed-role sessions
    arn: str  # user ARN, or the assumed-role session ARN
    account: str
    role_arn: str | None = None
    session_name: str | None = None
    # [(label, policy document dict)]: inline policies as "inline:<name>",
    # managed ones by ARN.
    policies: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass
class Decision:
    allowed: bool
    effect: str  # "Allow" | "Deny" (explicit) | "ImplicitDeny"
    policy: str | None = None  # the deciding policy: label, or "resource:<name>"
    sid: str | None = None  # the deciding statement's Sid (None: none, or implicit deny)
    statement_index: int | None = None
    note: str = ""


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    return [value]


def policy_statements(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in as_list(doc.get("Statement")) if isinstance(s, dict)]


def load_document(doc: Any) -> dict[str, Any]:
    if isinstance(doc, dict):
        return doc
    if isinstance(doc, bytes):
        doc = doc.decode()
    if isinstance(doc, str):
        from urllib.parse import unquote

        text = doc.strip()
        if not text.startswith("{"):
            text = unquote(text)  # IAM returns URL-encoded documents
        return json.loads(text)
    raise TypeError(f"not a policy document: {type(doc)}")


@lru_cache(maxsize=4096)
def _glob(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    out = []
    for ch in pattern:
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, ignore_case: bool = False) -> bool:
    return _glob(pattern, ignore_case).fullmatch(value) is not None


def _str(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_VAR = re.compile(r"\$\{([^}]+)\}")


def substitute_variables(text: str, ctx: dict[str, list[str]]) -> str | None:
    """Policy variables; None when a variable has no value (then the
    element does not match, as AWS documents for missing variables without
    a default)."""
    if "${" not in text:
        return text
    missing = False

    def repl(m: re.Match[str]) -> str:
        nonlocal missing
        inner = m.group(1)
        if inner in ("*", "?", "$"):
            return inner
        key, _, default = inner.partition(",")
        key = key.strip()
        default = default.strip()
        values = ctx.get(key.lower())
        if values and len(values) == 1:
            return values[0]
        if default.startswith("'") and default.endswith("'"):
            return default[1:-1]
        missing = True
        return ""

    out = _VAR.sub(repl, text)
    return None if missing else out


def _arn_like(pattern: str, value: str) -> bool:
    p = pattern.split(":", 5)
    v = value.split(":", 5)
    if len(p) != 6 or len(v) != 6:
        return pattern == value or (pattern == "*")
    return all(glob_match(a, b) for a, b in zip(p, v))


def _num(x: str) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _ip_in(pattern: str, value: str) -> bool:
    try:
        return ipaddress.ip_address(value) in ipaddress.ip_network(pattern, strict=False)
    except ValueError:
        return False


# base operator (lower case) -> (positive comparison, negated?)
_OPERATORS: dict[str, tuple[Any, bool]] = {
    "stringequals": (lambda pv, v: pv == v, False),
    "stringnotequals": (lambda pv, v: pv == v, True),
    "stringequalsignorecase": (lambda pv, v: pv.lower() == v.lower(), False),
    "stringnotequalsignorecase": (lambda pv, v: pv.lower() == v.lower(), True),
    "stringlike": (lambda pv, v: glob_match(pv, v), False),
    "stringnotlike": (lambda pv, v: glob_match(pv, v), True),
    "arnequals": (_arn_like, False),
    "arnlike": (_arn_like, False),
    "arnnotequals": (_arn_like, True),
    "arnnotlike": (_arn_like, True),
    "bool": (lambda pv, v: pv.lower() == v.lower(), False),
    "numericequals": (lambda pv, v: _num(v) is not None and _num(v) == _num(pv), False),
    "numericnotequals": (lambda pv, v: _num(v) is not None and _num(v) == _num(pv), True),
    "numericlessthan": (lambda pv, v: None not in (_num(v), _num(pv)) and _num(v) < _num(pv), False),
    "numericlessthanequals": (lambda pv, v: None not in (_num(v), _num(pv)) and _num(v) <= _num(pv), False),
    "numericgreaterthan": (lambda pv, v: None not in (_num(v), _num(pv)) and _num(v) > _num(pv), False),
    "numericgreaterthanequals": (lambda pv, v: None not in (_num(v), _num(pv)) and _num(v) >= _num(pv), False),
    "ipaddress": (_ip_in, False),
    "notipaddress": (_ip_in, True),
}


class UnsupportedCondition(Exception):
    pass


def condition_holds(operator: str, key: str, policy_values: list[Any], ctx: dict[str, list[str]]) -> bool:
    op = operator
    qualifier = None
    low = op.lower()
    if low.startswith("forallvalues:"):
        qualifier, op = "all", op[len("ForAllValues:"):]
    elif low.startswith("foranyvalue:"):
        qualifier, op = "any", op[len("ForAnyValue:"):]
    base = op.lower()
    if_exists = base.endswith("ifexists")
    if if_exists:
        base = base[: -len("ifexists")]
    request_values = ctx.get(key.lower())
    present = bool(request_values)
    pvals = [_str(v) for v in as_list(policy_values)]

    if base == "null":
        return any((pv.lower() == "true") == (not present) for pv in pvals)
    if base not in _OPERATORS:
        raise UnsupportedCondition(operator)
    compare, negated = _OPERATORS[base]

    if not present:
        if qualifier == "all":
            return True
        if qualifier == "any":
            return False
        if if_exists:
            return True
        return negated

    resolved: list[str] = []
    for pv in pvals:
        sub = substitute_variables(pv, ctx)
        if sub is not None:
            resolved.append(sub)

    def matches(v: str) -> bool:
        return any(compare(pv, v) for pv in resolved)

    assert request_values is not None
    if qualifier == "any":
        return any((not matches(v)) if negated else matches(v) for v in request_values)
    if qualifier == "all":
        return all((not matches(v)) if negated else matches(v) for v in request_values)
    if negated:
        return not any(matches(v) for v in request_values)
    return any(matches(v) for v in request_values)


def conditions_hold(condition: dict[str, Any] | None, ctx: dict[str, list[str]]) -> bool:
    for operator, pairs in (condition or {}).items():
        for key, values in pairs.items():
            if not condition_holds(operator, key, values, ctx):
                return False
    return True


def _element_matches(patterns: Any, value: str, ignore_case: bool, ctx: dict[str, list[str]]) -> bool:
    for p in as_list(patterns):
        p = substitute_variables(_str(p), ctx) if not ignore_case else _str(p)
        if p is None:
            continue
        if p == "*" or glob_match(p, value, ignore_case):
            return True
    return False


def _principal_match(principal: Any, caller: Caller) -> str | None:
    """'direct', 'account' or None."""
    if principal == "*":
        return "direct"
    if not isinstance(principal, dict):
        return None
    best = None
    for kind, values in principal.items():
        if kind != "AWS":
            continue
        for v in as_list(values):
            v = _str(v)
            if v in ("*", caller.arn) or (caller.role_arn and v == caller.role_arn):
                return "direct"
            if v in (caller.account, f"arn:aws:iam::{caller.account}:root"):
                best = "account"
    return best


def statement_applies(
    stmt: dict[str, Any],
    check: Check,
    ctx: dict[str, list[str]],
    caller: Caller | None = None,
    resource_based: bool = False,
) -> bool:
    if "NotAction" in stmt:
        if _element_matches(stmt["NotAction"], check.action, True, ctx):
            return False
    elif not _element_matches(stmt.get("Action"), check.action, True, ctx):
        return False
    if "NotResource" in stmt:
        if _element_matches(stmt["NotResource"], check.resource, False, ctx):
            return False
    elif "Resource" in stmt:
        if not _element_matches(stmt["Resource"], check.resource, False, ctx):
            return False
    elif not resource_based:
        return False  # identity statements must name resources
    if resource_based:
        assert caller is not None
        if "NotPrincipal" in stmt:
            if _principal_match(stmt["NotPrincipal"], caller) is not None:
                return False
        else:
            how = _principal_match(stmt.get("Principal"), caller)
            if how is None or (how == "account" and stmt.get("Effect") == "Allow"):
                return False
    return conditions_hold(stmt.get("Condition"), ctx)


def evaluate(
    check: Check,
    caller: Caller,
) -> Decision:
    ctx = check.ctx()
    allow: Decision | None = None
    notes: list[str] = []
    sources: list[tuple[str, list[dict[str, Any]], bool]] = [
        (label, policy_statements(doc), False) for label, doc in caller.policies
    ]
    if check.resource_policy:
        sources.append((f"resource:{check.resource_policy_name}", check.resource_policy, True))
    for label, statements, resource_based in sources:
        for i, stmt in enumerate(statements):
            try:
                applies = statement_applies(stmt, check, ctx, caller, resource_based)
            except UnsupportedCondition as e:
                notes.append(f"{label}#{i}: unsupported condition operator {e}, statement ignored")
                continue
            if not applies:
                continue
            effect = stmt.get("Effect")
            if effect == "Deny":
                return Decision(False, "Deny", label, stmt.get("Sid"), i, "; ".join(notes))
            if effect == "Allow" and allow is None:
                allow = Decision(True, "Allow", label, stmt.get("Sid"), i)
    if allow is not None:
        allow.note = "; ".join(notes)
        return allow
    return Decision(False, "ImplicitDeny", None, None, None, "; ".join(notes))


def trust_allows(trust: dict[str, Any], check: Check, caller: Caller) -> Decision:
    """A role's trust policy for sts:AssumeRole*: a resource-based policy
    that must itself allow the caller (explicit Deny wins). A principal
    naming the caller's account counts here (AWS then also requires the
    identity policy's Allow, which the caller's own check gives)."""
    ctx = check.ctx()
    allow: Decision | None = None
    for i, stmt in enumerate(policy_statements(trust)):
        if not _element_matches(stmt.get("Action"), check.action, True, ctx):
            continue
        if "NotPrincipal" in stmt:
            if _principal_match(stmt["NotPrincipal"], caller) is not None:
                continue
        elif _principal_match(stmt.get("Principal"), caller) is None:
            continue
        try:
            if not conditions_hold(stmt.get("Condition"), ctx):
                continue
        except UnsupportedCondition:
            continue
        if stmt.get("Effect") == "Deny":
            return Decision(False, "Deny", "trust-policy", stmt.get("Sid"), i)
        if allow is None:
            allow = Decision(True, "Allow", "trust-policy", stmt.get("Sid"), i)
    return allow or Decision(False, "ImplicitDeny", "trust-policy", None, None, "the role's trust policy does not allow this principal")
