"""The authorization AWS would do, for requests moto serves.

`install(secure_transport=True)` replaces moto 5.2.5's
`ActionAuthenticatorMixin._authenticate_and_authorize_action` (every
service's entry to IAM enforcement) with `_authorize` below:

- authentication stays moto's: the access key is looked up in moto's IAM
  (users' keys) and STS (assumed-role sessions), and the SigV4 signature is
  checked by moto's `check_signature` (with one fix: the payload hash is
  computed over the raw body, where moto used its parsed parameters for
  bodiless GETs, which failed every signed Lambda/Scheduler GET).
  Query-string signed requests (presigned S3 URLs), which moto cannot
  authenticate with IAM on, are verified here (SigV4 query signing, expiry).
- authorization is ours: the request is turned into the checks AWS makes
  (`checks_for`: action, resource ARN, condition context, resource policy)
  and each is evaluated by `policy.evaluate`. Every decision is recorded
  (`DECISIONS`); a denied check answers the request with AccessDenied.

moto's own resource-policy shortcut for S3 objects (`FakeBucket.get_permission`,
which ignores conditions and so turns the template's TlsOnly Deny into a
deny of everything) is neutralised: bucket policies are evaluated here, as
the resource-based policy of the S3 checks.

aws:SecureTransport: the harness speaks http:// to 127.0.0.1. It is set to
"true" for every request (`install(secure_transport=True)`): the loopback
endpoint stands for AWS's TLS endpoints, as if TLS were terminated in front
of it. The bucket policy's TlsOnly statement is still evaluated (with
`--insecure-transport` every S3 request is denied by it, which is what AWS
would do to a plain-HTTP request).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import logging
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlparse

from policy import Caller, Check, Decision, evaluate, load_document, policy_statements, trust_allows

log = logging.getLogger("stack.authz")

PARTITION = "aws"

# ---------------------------------------------------------------- decisions

_LOCK = threading.Lock()
DECISIONS: list[dict[str, Any]] = []
_SEQ = [0]


def record(caller: Caller | None, check: Check, decision: Decision, operation: str) -> None:
    with _LOCK:
        _SEQ[0] += 1
        DECISIONS.append(
            {
                "seq": _SEQ[0],
                "time": time.time(),
                "caller": caller.name if caller else None,
                "callerKind": caller.kind if caller else None,
                "operation": operation,
                "action": check.action,
                "resource": check.resource,
                "allowed": decision.allowed,
                "effect": decision.effect,
                "sid": decision.sid,
                "policy": decision.policy,
                "context": check.context,
                "fallback": check.fallback,
                "note": "; ".join(x for x in (check.note, decision.note) if x),
            }
        )


def decisions_snapshot() -> list[dict[str, Any]]:
    with _LOCK:
        return list(DECISIONS)


def reset_decisions() -> None:
    with _LOCK:
        DECISIONS.clear()


# ---------------------------------------------------------------- callers


def _iam(account: str):
    from moto.iam.models import iam_backends

    return iam_backends[account][PARTITION]


def _policy_doc(p: Any) -> dict[str, Any]:
    from moto.iam.models import Policy

    if isinstance(p, Policy):
        version = next(v for v in p.versions if v.is_default)
        return load_document(version.document)
    if isinstance(p, dict) and "policy_document" in p:
        return load_document(p["policy_document"])
    return load_document(p)


def caller_from_access_key(account: str, access_key: Any) -> Caller:
    """From moto's IAMUserAccessKey / AssumedRoleAccessKey."""
    from moto.iam.access_control import AssumedRoleAccessKey

    backend = _iam(account)
    if isinstance(access_key, AssumedRoleAccessKey):
        role_name = access_key._owner_role_name
        role = backend.get_role(role_name)
        policies = []
        for name in backend.list_role_policies(role_name):
            _, doc = backend.get_role_policy(role_name, name)
            policies.append((f"inline:{name}", load_document(doc)))
        attached, _ = backend.list_attached_role_policies(role_name)
        for p in attached:
            policies.append((p.arn, _policy_doc(p)))
        return Caller(
            kind="role",
            name=role_name,
            arn=access_key.arn,
            account=account,
            role_arn=role.arn,
            session_name=access_key._session_name,
            policies=policies,
        )
    user = access_key._owner_user_name
    policies = []
    for name in backend.list_user_policies(user):
        policies.append((f"inline:{name}", _policy_doc(backend.get_user_policy(user, name))))
    attached, _ = backend.list_attached_user_policies(user)
    for p in attached:
        policies.append((p.arn, _policy_doc(p)))
    for group in backend.get_groups_for_user(user):
        for name in backend.list_group_policies(group.name):
            policies.append((f"group:{group.name}:{name}", _policy_doc(backend.get_group_policy(group.name, name))))
        gattached, _ = backend.list_attached_group_policies(group.name)
        for p in gattached:
            policies.append((p.arn, _policy_doc(p)))
    return Caller(kind="user", name=user, arn=access_key.arn, account=account, policies=policies)


def global_context(caller: Caller, region: str, secure: bool) -> dict[str, list[str]]:
    ctx = {
        "aws:SecureTransport": ["true" if secure else "false"],
        "aws:PrincipalArn": [caller.role_arn or caller.arn],
        "aws:PrincipalAccount": [caller.account],
        "aws:PrincipalType": ["AssumedRole" if caller.kind == "role" else "User"],
        "aws:RequestedRegion": [region],
        "aws:CurrentTime": [_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")],
        "aws:EpochTime": [str(int(time.time()))],
        "aws:ViaAWSService": ["false"],
    }
    if caller.kind == "user":
        ctx["aws:username"] = [caller.name]
    return ctx


# ---------------------------------------------------------------- request -> checks

# service name in the SigV4 credential scope -> IAM action prefix
_PREFIX = {"monitoring": "cloudwatch", "email": "ses", "execute-api": "execute-api"}

_JSON_SERVICES = {"dynamodb", "ecs", "logs", "ssm", "secretsmanager", "events", "kinesis", "kms"}


class Request:
    """What checks_for needs from moto's BaseResponse."""

    def __init__(self, resp: Any, service: str, operation: str, moto_resource: str):
        self.resp = resp
        self.service = service
        self.operation = operation
        self.moto_resource = moto_resource
        self.account = resp.current_account
        self.region = resp.region
        self._json: Any = None
        if resp.headers.get("X-Amz-Target") or service in _JSON_SERVICES:
            try:
                body = getattr(resp, "raw_body", None) or resp.body
                if isinstance(body, dict):  # moto's DynamoDB replaces body by its parsed parameters
                    body = json.dumps(body)
                if isinstance(body, bytes):
                    body = body.decode()
                self._json = json.loads(body) if body else {}
            except (ValueError, TypeError, UnicodeDecodeError):
                self._json = None

    def param(self, name: str, default: Any = None) -> Any:
        if isinstance(self._json, dict):
            return self._json.get(name, default)
        v = self.resp.querystring.get(name)
        if isinstance(v, list):
            return v[0] if v else default
        return default if v is None else v

    def params_with_prefix(self, prefix: str) -> list[str]:
        """Query protocol lists: Names.member.1, ..."""
        out = []
        for k, v in self.resp.querystring.items():
            if k.startswith(prefix):
                out.extend(v if isinstance(v, list) else [v])
        return out

    def arn(self, service: str, rest: str, region: str | None = None) -> str:
        region = self.region if region is None else region
        return f"arn:{PARTITION}:{service}:{region}:{self.account}:{rest}"


# ---- DynamoDB


def _av_str(av: Any) -> str | None:
    if not isinstance(av, dict) or not av:
        return None
    (_, v), *_ = av.items()
    return v if isinstance(v, str) else json.dumps(v)


def _ddb_table(req: Request, name: str):
    from moto.dynamodb.models import dynamodb_backends

    try:
        return dynamodb_backends[req.account][req.region].get_table(name.split("/")[-1] if name.startswith("arn:") else name)
    except Exception:  # noqa: BLE001 - a missing table: no key schema
        return None


def _ddb_hash_attr(req: Request, table_name: str, index: str | None = None) -> str | None:
    table = _ddb_table(req, table_name)
    if table is None:
        return None
    if index:
        for idx in list(table.indexes) + list(table.global_indexes):
            if idx.name == index:
                for k in idx.schema:
                    if k["KeyType"] == "HASH":
                        return k["AttributeName"]
        return None
    return table.hash_key_attr


def _ddb_arn(req: Request, table: str, index: str | None = None) -> str:
    base = table if table.startswith("arn:") else req.arn("dynamodb", f"table/{table}")
    return f"{base}/index/{index}" if index else base


def _leading(req: Request, table: str, item: dict[str, Any] | None, index: str | None = None) -> dict[str, list[str]]:
    """dynamodb:LeadingKeys: the partition-key values the request touches
    (none when the table is unknown: the key is then missing)."""
    attr = _ddb_hash_attr(req, table, index)
    if attr is None or not isinstance(item, dict) or attr not in item:
        return {}
    v = _av_str(item[attr])
    return {"dynamodb:LeadingKeys": [v]} if v is not None else {}


def _query_hash_value(req: Request, table: str, index: str | None) -> dict[str, list[str]]:
    """The `attr = :value` of the key condition. Simplification: for a
    query on an index, LeadingKeys is the index's partition-key value (the
    template's only LeadingKeys condition names the table, not the index)."""
    import re

    attr = _ddb_hash_attr(req, table, index)
    if attr is None:
        return {}
    names = req.param("ExpressionAttributeNames") or {}
    values = req.param("ExpressionAttributeValues") or {}
    expr = req.param("KeyConditionExpression")
    if expr:
        for left, right in re.findall(r"([#:]?[\w.\-]+)\s*=\s*([#:]?[\w.\-]+)", expr):
            for name_tok, value_tok in ((left, right), (right, left)):
                if value_tok.startswith(":") and not name_tok.startswith(":"):
                    name = names.get(name_tok, name_tok)
                    if name == attr and value_tok in values:
                        v = _av_str(values[value_tok])
                        return {"dynamodb:LeadingKeys": [v]} if v is not None else {}
    legacy = req.param("KeyConditions") or {}
    cond = legacy.get(attr)
    if cond and cond.get("ComparisonOperator") == "EQ" and cond.get("AttributeValueList"):
        v = _av_str(cond["AttributeValueList"][0])
        return {"dynamodb:LeadingKeys": [v]} if v is not None else {}
    return {}


def _dynamodb(req: Request) -> list[Check] | None:
    op = req.operation
    act = lambda a: f"dynamodb:{a}"  # noqa: E731
    if op in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        t = req.param("TableName")
        item = req.param("Item") if op == "PutItem" else req.param("Key")
        return [Check(act(op), _ddb_arn(req, t), _leading(req, t, item))]
    if op == "Query":
        t, ix = req.param("TableName"), req.param("IndexName")
        return [Check(act(op), _ddb_arn(req, t, ix), _query_hash_value(req, t, ix))]
    if op == "Scan":
        t, ix = req.param("TableName"), req.param("IndexName")
        return [Check(act(op), _ddb_arn(req, t, ix))]
    if op == "BatchGetItem":
        # One check per item, each with its own partition key: the same
        # outcome as AWS's one check per table with all keys for the
        # ForAnyValue/ForAllValues conditions policies use.
        out = []
        for t, spec in (req.param("RequestItems") or {}).items():
            for key in spec.get("Keys", []):
                out.append(Check(act(op), _ddb_arn(req, t), _leading(req, t, key)))
        return out
    if op == "BatchWriteItem":
        out = []
        for t, writes in (req.param("RequestItems") or {}).items():
            for w in writes:
                item = (w.get("PutRequest") or {}).get("Item") or (w.get("DeleteRequest") or {}).get("Key")
                out.append(Check(act(op), _ddb_arn(req, t), _leading(req, t, item)))
        return out
    if op == "TransactWriteItems":
        # AWS has no dynamodb:TransactWriteItems permission: each item is
        # authorized as its own action.
        kinds = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem", "ConditionCheck": "ConditionCheckItem"}
        out = []
        for entry in req.param("TransactItems") or []:
            for kind, action in kinds.items():
                if kind in entry:
                    spec = entry[kind]
                    t = spec["TableName"]
                    item = spec.get("Item") if kind == "Put" else spec.get("Key")
                    out.append(Check(act(action), _ddb_arn(req, t), _leading(req, t, item), note=f"TransactWriteItems {kind}"))
        return out
    if op == "TransactGetItems":
        out = []
        for entry in req.param("TransactItems") or []:
            spec = entry.get("Get") or {}
            t = spec.get("TableName", "")
            out.append(Check(act("GetItem"), _ddb_arn(req, t), _leading(req, t, spec.get("Key")), note="TransactGetItems Get"))
        return out
    if op in ("ListTagsOfResource", "TagResource", "UntagResource"):
        return [Check(act(op), req.param("ResourceArn"))]
    t = req.param("TableName")
    if t:
        return [Check(act(op), _ddb_arn(req, t))]
    if op in ("ListTables", "DescribeLimits", "DescribeEndpoints", "ListBackups", "ListGlobalTables"):
        return [Check(act(op), "*")]
    return None


# ---- SQS

_SQS_ACTION = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def _sqs(req: Request) -> list[Check] | None:
    from moto.sqs.models import sqs_backends

    op = req.operation
    action = f"sqs:{_SQS_ACTION.get(op, op)}"
    if op == "ListQueues":
        return [Check(action, "*")]
    name = None
    url = req.param("QueueUrl")
    if url:
        name = url.rstrip("/").split("/")[-1]
    elif req.param("QueueName"):
        name = req.param("QueueName")
    if not name:
        return None
    arn = req.arn("sqs", name)
    policy = None
    try:
        queue = sqs_backends[req.account][req.region].get_queue(name)
        arn = queue.queue_arn
        if queue.policy:
            policy = policy_statements(load_document(queue.policy))
    except Exception:  # noqa: BLE001 - no such queue (yet)
        pass
    return [Check(action, arn, resource_policy=policy, resource_policy_name=f"queue:{name}")]


# ---- S3

# moto's S3 action names -> IAM actions
_S3_ACTION = {
    "HeadBucket": "ListBucket",
    "ListObjects": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "ListObjectVersions": "ListBucketVersions",
    "ListBuckets": "ListAllMyBuckets",
    "GetBucketEncryption": "GetEncryptionConfiguration",
    "PutBucketEncryption": "PutEncryptionConfiguration",
    "GetBucketLifecycleConfiguration": "GetLifecycleConfiguration",
    "PutBucketLifecycleConfiguration": "PutLifecycleConfiguration",
    "GetPublicAccessBlock": "GetBucketPublicAccessBlock",
    "PutPublicAccessBlock": "PutBucketPublicAccessBlock",
    "DeletePublicAccessBlock": "PutBucketPublicAccessBlock",
    "ListMultipartUploads": "ListBucketMultipartUploads",
    "GetBucketOwnershipControls": "GetBucketOwnershipControls",
    "HeadObject": "GetObject",
    "DeleteObjects": "DeleteObject",
    "CopyObject": "PutObject",
}


def _s3(req: Request) -> list[Check] | None:
    from moto.s3.models import s3_backends

    op = req.resp.data.get("Action") if isinstance(req.resp.data, dict) else None
    if isinstance(op, list):
        op = op[0]
    op = op or req.operation
    action = f"s3:{_S3_ACTION.get(op, op)}"
    resource = req.moto_resource
    ctx: dict[str, list[str]] = {}
    if _S3_ACTION.get(op, op) == "ListBucket":
        for q in ("prefix", "delimiter", "max-keys"):
            v = req.resp.querystring.get(q)
            if v:
                ctx[f"s3:{q}"] = v if isinstance(v, list) else [v]
    for h in ("x-amz-acl", "x-amz-server-side-encryption", "x-amz-copy-source", "x-amz-storage-class"):
        v = req.resp.headers.get(h)
        if v:
            ctx[f"s3:{h}"] = [v]
    policy = None
    bucket_name = resource.split(":::", 1)[-1].split("/", 1)[0] if ":::" in resource else None
    if bucket_name and bucket_name != "*":
        bucket = s3_backends[req.account][PARTITION].buckets.get(bucket_name)
        if bucket is not None and bucket.policy:
            policy = policy_statements(load_document(bucket.policy))
    return [Check(action, resource, ctx, resource_policy=policy, resource_policy_name=f"bucket:{bucket_name}")]


# ---- ECS


def _ecs_backend(req: Request):
    from moto.ecs.models import ecs_backends

    return ecs_backends[req.account][req.region]


def _cluster_arn(req: Request, cluster: str | None) -> str:
    cluster = cluster or "default"
    return cluster if cluster.startswith("arn:") else req.arn("ecs", f"cluster/{cluster}")


def _task_definition(req: Request, ref: str | None):
    if not ref:
        return None
    try:
        return _ecs_backend(req).describe_task_definition(ref)
    except Exception:  # noqa: BLE001
        return None


def _pass_role_checks(req: Request, role_arns: list[str | None], service: str = "ecs-tasks.amazonaws.com") -> list[Check]:
    out = []
    for arn in dict.fromkeys(a for a in role_arns if a):
        if not arn.startswith("arn:"):
            arn = f"arn:{PARTITION}:iam::{req.account}:role/{arn}"
        out.append(Check("iam:PassRole", arn, {"iam:PassedToService": [service]}, note=f"{req.operation} passes the role"))
    return out


def _tag_context(tags: list[dict[str, str]] | None) -> dict[str, list[str]]:
    ctx: dict[str, list[str]] = {}
    keys = []
    for t in tags or []:
        k, v = t.get("key", t.get("Key")), t.get("value", t.get("Value"))
        if k is not None:
            keys.append(k)
            ctx[f"aws:RequestTag/{k}"] = [v or ""]
    if keys:
        ctx["aws:TagKeys"] = keys
    return ctx


def _ecs(req: Request) -> list[Check] | None:
    op = req.operation
    act = f"ecs:{op}"
    cluster = _cluster_arn(req, req.param("cluster"))
    cluster_name = cluster.split("/")[-1]
    cctx = {"ecs:cluster": [cluster]}
    out: list[Check] = []

    def tag_on_create(resource: str, create_action: str, extra: dict[str, list[str]] | None = None) -> None:
        tags = req.param("tags")
        if tags:
            ctx = {"ecs:CreateAction": [create_action], **_tag_context(tags), **(extra or {})}
            out.append(Check("ecs:TagResource", resource, ctx, note=f"tags on {create_action}"))

    if op == "RegisterTaskDefinition":
        family = req.param("family", "")
        # No resource-level permissions for RegisterTaskDefinition: "*".
        out.append(Check(act, "*", _tag_context(req.param("tags"))))
        backend = _ecs_backend(req)
        revs = backend.task_definitions.get(family) or {}
        next_rev = (max(revs) if revs else 0) + 1
        tag_on_create(req.arn("ecs", f"task-definition/{family}:{next_rev}"), op)
        out.extend(_pass_role_checks(req, [req.param("taskRoleArn"), req.param("executionRoleArn")]))
        return out
    if op in ("DescribeTaskDefinition", "ListTaskDefinitions", "ListTaskDefinitionFamilies", "DeregisterTaskDefinition", "ListClusters"):
        return [Check(act, "*")]
    if op == "RunTask":
        td = _task_definition(req, req.param("taskDefinition"))
        td_arn = td.arn if td else req.arn("ecs", f"task-definition/{req.param('taskDefinition')}")
        out.append(Check(act, td_arn, {**cctx, "ecs:task-definition": [td_arn], **_tag_context(req.param("tags"))}))
        # The task's ARN is not known before it exists: the tag check names
        # every task of the cluster (a policy naming one task id cannot match).
        tag_on_create(req.arn("ecs", f"task/{cluster_name}/*"), op, cctx)
        # iam:PassRole for the roles the task gets: the overrides' and the
        # task definition's own (ECS checks the caller may pass them).
        overrides = req.param("overrides") or {}
        roles = [overrides.get("taskRoleArn"), overrides.get("executionRoleArn")]
        if td is not None:
            roles += [getattr(td, "task_role_arn", None), getattr(td, "execution_role_arn", None)]
        out.extend(_pass_role_checks(req, roles))
        return out
    if op in ("StopTask", "DescribeTasks"):
        tasks = [req.param("task")] if op == "StopTask" else (req.param("tasks") or [])
        for t in tasks:
            arn = t if str(t).startswith("arn:") else req.arn("ecs", f"task/{cluster_name}/{t}")
            out.append(Check(act, arn, cctx))
        return out
    if op == "ListTasks":
        # AWS: resource type container-instance, condition key ecs:cluster.
        return [Check(act, req.arn("ecs", f"container-instance/{cluster_name}/*"), cctx)]
    if op in ("CreateService", "UpdateService"):
        name = req.param("serviceName") if op == "CreateService" else req.param("service")
        arn = name if str(name).startswith("arn:") else req.arn("ecs", f"service/{cluster_name}/{name}")
        ctx = dict(cctx)
        td = _task_definition(req, req.param("taskDefinition"))
        if td is not None:
            ctx["ecs:task-definition"] = [td.arn]
        out.append(Check(act, arn, {**ctx, **_tag_context(req.param("tags"))}))
        if op == "CreateService":
            tag_on_create(arn, op, cctx)
        # Simplification: PassRole is asked for the task definition's roles
        # on CreateService, and on UpdateService when it names one.
        if td is not None:
            out.extend(_pass_role_checks(req, [getattr(td, "task_role_arn", None), getattr(td, "execution_role_arn", None)]))
        if req.param("role"):
            out.extend(_pass_role_checks(req, [req.param("role")], "ecs.amazonaws.com"))
        return out
    if op == "DescribeServices":
        for s in req.param("services") or []:
            arn = s if str(s).startswith("arn:") else req.arn("ecs", f"service/{cluster_name}/{s}")
            out.append(Check(act, arn, cctx))
        return out
    if op in ("DeleteService",):
        s = req.param("service")
        arn = s if str(s).startswith("arn:") else req.arn("ecs", f"service/{cluster_name}/{s}")
        return [Check(act, arn, cctx)]
    if op == "ListServices":
        return [Check(act, "*", cctx)]
    if op in ("TagResource", "UntagResource", "ListTagsForResource"):
        return [Check(act, req.param("resourceArn"), _tag_context(req.param("tags")))]
    if op in ("DescribeClusters",):
        return [Check(act, _cluster_arn(req, c)) for c in (req.param("clusters") or ["default"])]
    if op in ("CreateCluster",):
        return [Check(act, _cluster_arn(req, req.param("clusterName")))]
    return None


# ---- CloudWatch Logs


def _logs(req: Request) -> list[Check] | None:
    op = req.operation
    act = f"logs:{op}"
    group = req.param("logGroupName") or req.param("logGroupIdentifier")
    if group and group.startswith("arn:"):
        group = group.split(":log-group:", 1)[-1].split(":", 1)[0]
    stream = req.param("logStreamName")
    if op in ("GetLogEvents", "PutLogEvents", "CreateLogStream", "DeleteLogStream") and group and stream:
        return [Check(act, req.arn("logs", f"log-group:{group}:log-stream:{stream}"))]
    if op in ("DescribeLogGroups",):
        return [Check(act, req.arn("logs", "log-group:*"))]
    if op in ("TagResource", "UntagResource", "ListTagsForResource"):
        return [Check(act, req.param("resourceArn"))]
    if op in ("TagLogGroup", "UntagLogGroup", "ListTagsLogGroup") and group:
        return [Check(act, req.arn("logs", f"log-group:{group}"))]
    if group:
        # AWS: the log group's ARN "with the trailing :*" is what policies
        # must name for every log-group action but tagging (CloudWatch Logs
        # User Guide, "CloudWatch Logs resources and operations"). The
        # request is evaluated against that form, so `log-group:NAME:*`
        # and `log-group:*` match and a bare `log-group:NAME` does not.
        return [Check(act, req.arn("logs", f"log-group:{group}:*"))]
    return None


# ---- SSM, Secrets Manager


def _param_arn(req: Request, name: str) -> str:
    if name.startswith("arn:"):
        return name
    return req.arn("ssm", f"parameter/{name.lstrip('/')}")


def _ssm(req: Request) -> list[Check] | None:
    op = req.operation
    act = f"ssm:{op}"
    if op == "GetParameters" or op == "DeleteParameters":
        return [Check(act, _param_arn(req, n)) for n in (req.param("Names") or [])]
    if op == "GetParametersByPath":
        return [Check(act, _param_arn(req, req.param("Path", "/")))]
    if req.param("Name"):
        name = req.param("Name").split(":", 1)[0] if not req.param("Name").startswith("arn:") else req.param("Name")
        return [Check(act, _param_arn(req, name))]
    if op in ("DescribeParameters",):
        return [Check(act, "*")]
    return None


def _secretsmanager(req: Request) -> list[Check] | None:
    from moto.secretsmanager.models import secretsmanager_backends

    op = req.operation
    sid = req.param("SecretId") or req.param("Name")
    if op == "ListSecrets" or not sid:
        return [Check(f"secretsmanager:{op}", "*")]
    arn = None
    try:
        secret = secretsmanager_backends[req.account][req.region].secrets.get(sid)
        if secret is not None:
            arn = secret.arn
    except Exception:  # noqa: BLE001
        pass
    if arn is None:
        arn = sid if sid.startswith("arn:") else req.arn("secretsmanager", f"secret:{sid}")
    return [Check(f"secretsmanager:{op}", arn)]


# ---- Lambda


def _lambda(req: Request) -> list[Check] | None:
    """Invoke (`POST /2015-03-31/functions/NAME/invocations[?Qualifier=Q]`):
    IAM's action is lambda:InvokeFunction, whatever the invocation type,
    on the function's ARN, qualified when the request names a version or
    alias (a qualified ARN is matched by `ARN:*`, not by the bare ARN)."""
    if req.operation not in ("Invoke", "InvokeAsync"):
        return None
    parts = urlparse(req.resp.uri).path.rstrip("/").split("/")
    name = unquote(parts[-2])
    qualifier = req.param("Qualifier")
    if not name.startswith("arn:"):
        bare, _, named = name.partition(":")
        name = req.arn("lambda", f"function:{bare}") + (f":{named}" if named else "")
    arn = f"{name}:{qualifier}" if qualifier and not name.endswith(f":{qualifier}") else name
    return [Check("lambda:InvokeFunction", arn)]


# ---- STS, IAM


def _sts(req: Request) -> list[Check] | None:
    """AssumeRole: the caller's identity policy must allow it, then the
    role's trust policy (see _authorize). Simplification: AWS does not ask
    the identity policy when the trust policy names the caller's ARN
    itself; here both are always required."""
    op = req.operation
    if op in ("AssumeRole", "AssumeRoleWithWebIdentity", "AssumeRoleWithSAML"):
        return [Check(f"sts:{op}", req.param("RoleArn"))]
    return None


def _cloudwatch(req: Request) -> list[Check] | None:
    # DescribeAlarms names its alarms (AlarmNames.member.N): one check per
    # alarm ARN, as IAM authorizes it; without names, every alarm (*).
    if req.operation != "DescribeAlarms":
        return None
    names = req.params_with_prefix("AlarmNames.member.") or list(req.param("AlarmNames") or [])
    if not names:
        return [Check("cloudwatch:DescribeAlarms", "*")]
    return [Check("cloudwatch:DescribeAlarms", req.arn("cloudwatch", f"alarm:{n}")) for n in names]


_DERIVE = {
    "monitoring": _cloudwatch,
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "s3": _s3,
    "ecs": _ecs,
    "logs": _logs,
    "ssm": _ssm,
    "secretsmanager": _secretsmanager,
    "sts": _sts,
    "lambda": _lambda,
}


def checks_for(req: Request) -> list[Check]:
    derive = _DERIVE.get(req.service)
    checks = derive(req) if derive else None
    if checks == []:
        # e.g. a batch naming no items: never let a request through unchecked
        action = f"{_PREFIX.get(req.service, req.service)}:{req.operation}"
        return [Check(action, req.moto_resource or "*", note="no resource named in the request")]
    if checks is None:
        action = f"{_PREFIX.get(req.service, req.service)}:{req.operation}"
        # (the admin's set-up calls land here all the time: quiet for it)
        (log.info if req.resp.headers.get("X-Amz-Security-Token") is None else log.warning)(
            "fallback: %s on resource * (no resource mapping for this operation)", action
        )
        return [Check(action, req.moto_resource or "*", fallback=True, note="fallback: moto's action name, resource *")]
    return checks


# ---------------------------------------------------------------- presigned (query-string) SigV4


def _uri_encode(s: str) -> str:
    return quote(s, safe="-_.~")


def verify_presigned(resp: Any) -> Any:
    """Authenticate a query-string signed request; returns moto's access key
    object. Raises moto's S3 errors."""
    from moto.iam.access_control import CreateAccessKeyFailure, create_access_key
    from moto.s3.exceptions import S3AccessDeniedError, S3InvalidAccessKeyIdError, S3InvalidTokenError, S3SignatureDoesNotMatchError

    raw_query = urlparse(resp.uri).query
    pairs = parse_qsl(raw_query, keep_blank_values=True)
    q = dict(pairs)
    credential = q.get("X-Amz-Credential", "")
    parts = credential.split("/")
    if q.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or len(parts) != 5:
        raise S3AccessDeniedError()
    akid, date, region, service, _ = parts
    headers = {}
    if "X-Amz-Security-Token" in q:
        headers["X-Amz-Security-Token"] = q["X-Amz-Security-Token"]
    try:
        key = create_access_key(resp.current_account, PARTITION, akid, headers)
    except CreateAccessKeyFailure as e:
        if e.reason == "InvalidToken":
            raise S3InvalidTokenError()
        raise S3InvalidAccessKeyIdError()
    creds = key.create_credentials()
    amz_date = q.get("X-Amz-Date", "")
    signed_headers = q.get("X-Amz-SignedHeaders", "host").split(";")
    canonical_query = "&".join(
        f"{_uri_encode(k)}={_uri_encode(v)}" for k, v in sorted(pairs) if k != "X-Amz-Signature"
    )
    hdrs = {k.lower(): v for k, v in resp.headers.items()}
    canonical_headers = "".join(f"{h}:{' '.join(str(hdrs.get(h, '')).split())}\n" for h in signed_headers)
    payload = q.get("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD")
    path = resp.raw_path.split("?", 1)[0] if getattr(resp, "raw_path", None) else urlparse(resp.uri).path
    canonical = "\n".join([resp.method, path or "/", canonical_query, canonical_headers, ";".join(signed_headers), payload])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])

    def h(k: bytes, m: str) -> bytes:
        return hmac.new(k, m.encode(), hashlib.sha256).digest()

    k = h(h(h(h(("AWS4" + creds.secret_key).encode(), date), region), service), "aws4_request")
    signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(signature, q.get("X-Amz-Signature", "")):
        raise S3SignatureDoesNotMatchError()
    try:
        issued = _dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.timezone.utc)
        expires = int(q.get("X-Amz-Expires", "0"))
    except ValueError:
        raise S3AccessDeniedError()
    if _dt.datetime.now(_dt.timezone.utc) > issued + _dt.timedelta(seconds=expires):
        raise S3AccessDeniedError()  # "Request has expired"
    return key, region, service


# ---------------------------------------------------------------- the patch

SETTINGS = {"secure_transport": True}


def _json_access_denied(message: str):
    from moto.core.exceptions import JsonRESTError

    err = JsonRESTError("AccessDeniedException", message)
    err.code = 403
    return err


def _deny(resp: Any, iam_request: Any, caller: Caller, check: Check, decision: Decision, s3: bool):
    why = {
        "Deny": f"with an explicit deny in {decision.policy}" + (f" (Sid {decision.sid})" if decision.sid else ""),
        "ImplicitDeny": f"because no policy allows the {check.action} action",
    }[decision.effect]
    message = f"User: {caller.arn} is not authorized to perform: {check.action} on resource: {check.resource} {why}"
    if s3:
        from moto.s3.exceptions import BucketAccessDeniedError, S3AccessDeniedError

        if isinstance(resp.data, dict) and "BucketName" in resp.data:
            raise BucketAccessDeniedError(bucket=resp.data["BucketName"])
        raise S3AccessDeniedError()
    if resp.headers.get("X-Amz-Target") or "json" in (resp.headers.get("Content-Type") or ""):
        raise _json_access_denied(message)
    from moto.core.exceptions import AccessDeniedError

    raise AccessDeniedError(user_arn=caller.arn, action=f"{check.action} on resource: {check.resource} {why}")


def _authorize(self: Any, iam_request_cls: type, resource: str = "*") -> None:
    from moto import settings
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.access_control import S3IAMRequest

    if ActionAuthenticatorMixin.request_count < settings.INITIAL_NO_AUTH_ACTION_COUNT:
        ActionAuthenticatorMixin.request_count += 1
        return
    if self.headers.get("X-Amz-Target") in ActionAuthenticatorMixin.PUBLIC_OPERATIONS:
        return
    is_s3 = iam_request_cls is S3IAMRequest
    operation = self._get_action()
    if isinstance(operation, list):
        operation = operation[0]
    iam_request = None
    url_query = dict(parse_qsl(urlparse(self.uri).query, keep_blank_values=True))
    if "Authorization" not in self.headers and "X-Amz-Signature" in url_query:
        access_key, region, service = verify_presigned(self)
    elif "Authorization" not in self.headers:
        # Anonymous, or signed some other way (SigV2 presigned URLs): nothing
        # in this account is public, and SigV4 is all the SDKs use.
        from moto.core.exceptions import AccessDeniedError
        from moto.s3.exceptions import S3AccessDeniedError

        why = "SigV2 query signing is not supported (only SigV4)" if "Signature" in url_query else "anonymous request"
        record(None, Check(f"?:{operation}", self.uri.split("?", 1)[0]), Decision(False, "ImplicitDeny", note=why), operation)
        raise S3AccessDeniedError() if is_s3 else AccessDeniedError(user_arn="anonymous", action=operation)
    else:
        parsed_url = urlparse(self.uri)
        path = self.raw_path
        if parsed_url.query:
            path += "?" + parsed_url.query
        try:
            iam_request = iam_request_cls(
                account_id=self.current_account,
                method=self.method,
                path=path,
                data=self.data,
                body=self.raw_body,
                headers=self.headers,
                action=operation,
            )
            iam_request.check_signature()
        except Exception as e:
            # unknown key, wrong or missing session token, bad signature
            why = f"authentication failed: {type(e).__name__}"
            record(None, Check(f"?:{operation}", "*"), Decision(False, "ImplicitDeny", note=why), operation)
            raise
        access_key, region, service = iam_request._access_key, iam_request._region, iam_request._service
    if service == "sts" and operation == "GetCallerIdentity":
        return  # AWS: always allowed, whatever the policies say
    caller = caller_from_access_key(self.current_account, access_key)
    req = Request(self, service, operation, resource)
    gctx = global_context(caller, region, SETTINGS["secure_transport"])
    for check in checks_for(req):
        check.context = {**gctx, **check.context}
        decision = evaluate(check, caller)
        record(caller, Check(check.action, check.resource, {k: v for k, v in check.context.items() if k not in gctx}, fallback=check.fallback, note=check.note), decision, f"{service}:{operation}")
        if not decision.allowed:
            _deny(self, iam_request, caller, check, decision, is_s3)
        if check.action.lower().startswith("sts:assumerole"):
            # The role's trust policy. (moto's own check fails with a 500 on
            # trust policies naming service principals.)
            trust_check = Check(check.action, check.resource, check.context)
            try:
                role = _iam(self.current_account).get_role_by_arn(check.resource)
                trust = load_document(role.assume_role_policy_document)
            except Exception:  # noqa: BLE001 - no such role: STS answers it
                continue
            t = trust_allows(trust, trust_check, caller)
            record(caller, Check(check.action, check.resource, note="trust policy"), t, f"{service}:{operation}")
            if not t.allowed:
                _deny(self, iam_request, caller, check, t, is_s3)


def _create_aws_request(self: Any):
    """moto's, with the payload taken from the raw body only."""
    from botocore.awsrequest import AWSRequest

    signed_headers = self._get_string_between("SignedHeaders=", ",", self._headers["Authorization"]).split(";")
    headers = self._create_headers_for_aws_request(signed_headers, self._headers)
    body: Any = self._body
    if isinstance(body, str):
        body = body.encode()
    content_type = next((v for k, v in self._headers.items() if k.lower() == "content-type"), "")
    if not body and "x-www-form-urlencoded" in content_type:
        # werkzeug consumed a form body: moto's parsed parameters, re-encoded in order
        body = self._data
    request = AWSRequest(method=self._method, url=self._path, data=body or b"", headers=headers)
    request.context["timestamp"] = headers["X-Amz-Date"]
    return request


_INSTALLED = [False]


def install(secure_transport: bool = True) -> None:
    from moto.core.authorization import ActionAuthenticatorMixin
    from moto.iam.access_control import IAMRequestBase, PermissionResult
    from moto.s3.models import FakeBucket

    SETTINGS["secure_transport"] = secure_transport
    if _INSTALLED[0]:
        return
    ActionAuthenticatorMixin._authenticate_and_authorize_action = _authorize
    IAMRequestBase._create_aws_request = _create_aws_request
    FakeBucket.get_permission = lambda self, action, resource: PermissionResult.NEUTRAL
    _INSTALLED[0] = True
