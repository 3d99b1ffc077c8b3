#!/usr/bin/env python3
"""Self-test of account.py: the IAM evaluator against moto, with the
template's own roles. Run: python3 tests/stack/test_account.py [-v]

One account (moto server, template deployed) for the whole run, as
account.py makes it; extra roles for the cases the template has no role
for are created by the admin and assumed over STS.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

import account  # noqa: E402

ACCT: account.Account | None = None
STACK: dict[str, Any] = {}


def setUpModule() -> None:
    global ACCT, STACK
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    ACCT = account.Account(port=0)
    out = os.path.join(tempfile.mkdtemp(), "stack.json")
    STACK = account.build(ACCT, os.path.join(HERE, "..", "..", "template.yaml"), out, "vergence", {}, "vergence-jobs")
    with open(out) as f:
        assert json.load(f)["endpoint"] == ACCT.endpoint


def tearDownModule() -> None:
    if ACCT is not None:
        ACCT.stop()


def fn(name: str) -> dict[str, Any]:
    return STACK["functions"][name]


def client(service: str, who: str | dict[str, str]) -> Any:
    assert ACCT is not None
    creds = fn(who)["credentials"] if isinstance(who, str) else who
    return ACCT.client(service, creds)


def admin(service: str) -> Any:
    assert ACCT is not None
    return ACCT.client(service)


def status(call: Any, *args: Any, **kwargs: Any) -> int:
    from botocore.exceptions import ClientError

    try:
        out = call(*args, **kwargs)
        return out["ResponseMetadata"]["HTTPStatusCode"]
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"]


def last_decisions(n: int = 20) -> list[dict[str, Any]]:
    import authz

    return authz.decisions_snapshot()[-n:]


def table() -> str:
    return STACK["resources"]["StateTable"]["physicalId"]


def bucket() -> str:
    return STACK["resources"]["ArtifactBucket"]["physicalId"]


_ROLES: dict[str, dict[str, str]] = {}


def role_with(name: str, statements: list[dict[str, Any]]) -> dict[str, str]:
    """A role the admin may assume, with one inline policy; its session credentials."""
    if name in _ROLES:
        return _ROLES[name]
    iam = admin("iam")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{account.ACCOUNT}:user/admin"}, "Action": "sts:AssumeRole"}]}
    arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.put_role_policy(RoleName=name, PolicyName="p", PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    c = admin("sts").assume_role(RoleArn=arn, RoleSessionName="test")["Credentials"]
    _ROLES[name] = {"accessKeyId": c["AccessKeyId"], "secretAccessKey": c["SecretAccessKey"], "sessionToken": c["SessionToken"]}
    return _ROLES[name]


def item(pk: str, sk: str = "x", **extra: str) -> dict[str, Any]:
    out = {"pk": {"S": pk}, "sk": {"S": sk}}
    out.update({k: {"S": v} for k, v in extra.items()})
    return out


class Evaluator(unittest.TestCase):
    """policy.py on its own: the condition semantics the template relies on."""

    def test_missing_keys_and_set_operators(self) -> None:
        from policy import condition_holds as c

        self.assertFalse(c("ForAnyValue:StringEquals", "dynamodb:LeadingKeys", ["tokens"], {}))
        self.assertTrue(c("ForAllValues:StringEquals", "dynamodb:LeadingKeys", ["tokens"], {}))
        self.assertTrue(c("ForAnyValue:StringEquals", "dynamodb:leadingkeys", ["tokens"], {"dynamodb:leadingkeys": ["a", "tokens"]}))
        self.assertFalse(c("ForAllValues:StringEquals", "dynamodb:LeadingKeys", ["tokens"], {"dynamodb:leadingkeys": ["a", "tokens"]}))
        self.assertFalse(c("StringEquals", "ecs:CreateAction", ["RunTask"], {}))
        self.assertTrue(c("StringNotEquals", "ecs:CreateAction", ["RunTask"], {}))
        self.assertTrue(c("StringEqualsIfExists", "ecs:CreateAction", ["RunTask"], {}))
        self.assertTrue(c("Null", "ecs:CreateAction", ["true"], {}))
        self.assertFalse(c("Null", "ecs:CreateAction", ["true"], {"ecs:createaction": ["RunTask"]}))
        self.assertTrue(c("Bool", "aws:SecureTransport", ["false"], {"aws:securetransport": ["false"]}))
        self.assertFalse(c("Bool", "aws:SecureTransport", [False], {"aws:securetransport": ["true"]}))
        self.assertTrue(c("ArnEquals", "ecs:cluster", ["arn:aws:ecs:*:123456789012:cluster/j*"], {"ecs:cluster": ["arn:aws:ecs:us-east-1:123456789012:cluster/jobs"]}))
        self.assertFalse(c("ArnLike", "ecs:cluster", ["arn:aws:ecs:us-east-1:123456789012:cluster/jobs"], {"ecs:cluster": ["arn:aws:ecs:us-east-1:123456789012:cluster/other"]}))
        self.assertTrue(c("ArnNotLike", "ecs:cluster", ["arn:aws:ecs:us-east-1:123456789012:cluster/jobs"], {}))
        self.assertTrue(c("StringLike", "s3:prefix", ["jobs/*"], {"s3:prefix": ["jobs/a"]}))
        self.assertFalse(c("StringNotLike", "s3:prefix", ["jobs/*"], {"s3:prefix": ["jobs/a"]}))

    def test_statements(self) -> None:
        from policy import Caller, Check, evaluate

        caller = Caller("role", "r", "arn:aws:sts::1:assumed-role/r/s", "1", role_arn="arn:aws:iam::1:role/r", policies=[("inline:p", {"Statement": [
            {"Sid": "A", "Effect": "Allow", "NotAction": "s3:Delete*", "Resource": "arn:aws:s3:::b/*"},
            {"Sid": "D", "Effect": "Deny", "Action": "S3:GetObject", "NotResource": "arn:aws:s3:::b/public/*"},
        ]})])
        d = evaluate(Check("s3:PutObject", "arn:aws:s3:::b/x"), caller)
        self.assertEqual((d.allowed, d.sid), (True, "A"))
        d = evaluate(Check("s3:GetObject", "arn:aws:s3:::b/x"), caller)
        self.assertEqual((d.allowed, d.effect, d.sid), (False, "Deny", "D"))
        self.assertTrue(evaluate(Check("s3:GetObject", "arn:aws:s3:::b/public/x"), caller).allowed)
        d = evaluate(Check("s3:DeleteObject", "arn:aws:s3:::b/x"), caller)
        self.assertEqual((d.allowed, d.effect), (False, "ImplicitDeny"))
        # a resource policy Allow naming the role grants; one naming the account does not
        rp = [{"Sid": "R", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:role/r"}, "Action": "sqs:SendMessage", "Resource": "*"}]
        self.assertTrue(evaluate(Check("sqs:SendMessage", "arn:aws:sqs:r:1:q", resource_policy=rp), caller).allowed)
        rp = [{"Sid": "R", "Effect": "Allow", "Principal": {"AWS": "1"}, "Action": "sqs:SendMessage", "Resource": "*"}]
        self.assertFalse(evaluate(Check("sqs:SendMessage", "arn:aws:sqs:r:1:q", resource_policy=rp), caller).allowed)


class DynamoDB(unittest.TestCase):
    def test_role_scoped_to_its_table(self) -> None:
        other = "other-table"
        admin("dynamodb").create_table(
            TableName=other, BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        )
        arn = STACK["resources"]["StateTable"]["arn"]
        creds = role_with("only-its-table", [{"Sid": "ItsTable", "Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": arn}])
        ddb = client("dynamodb", creds)
        self.assertEqual(status(ddb.get_item, TableName=table(), Key=item("a")), 200)
        self.assertEqual(last_decisions(1)[0]["sid"], "ItsTable")
        self.assertEqual(status(ddb.get_item, TableName=other, Key=item("a")), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["allowed"], d["effect"], d["resource"]), (False, "ImplicitDeny", f"arn:aws:dynamodb:us-east-1:{account.ACCOUNT}:table/{other}"))

    def test_worker_may_not_read_tokens(self) -> None:
        ddb = client("dynamodb", "worker")
        self.assertEqual(status(ddb.get_item, TableName=table(), Key=item("tokens", "t1")), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["caller"], d["effect"], d["sid"]), (fn("worker")["role"]["name"], "Deny", "NoTokens"))
        self.assertEqual(d["context"]["dynamodb:LeadingKeys"], ["tokens"])
        self.assertEqual(status(ddb.get_item, TableName=table(), Key=item("instance#shop/web/prod")), 200)
        self.assertEqual(last_decisions(1)[0]["sid"], "State")
        q = dict(TableName=table(), KeyConditionExpression="#p = :p AND begins_with(sk, :s)", ExpressionAttributeNames={"#p": "pk"})
        self.assertEqual(status(ddb.query, **q, ExpressionAttributeValues={":p": {"S": "tokens"}, ":s": {"S": "a"}}), 403)
        self.assertEqual(last_decisions(1)[0]["sid"], "NoTokens")
        self.assertEqual(status(ddb.query, **q, ExpressionAttributeValues={":p": {"S": "events#shop"}, ":s": {"S": "a"}}), 200)
        # the due index: allowed by State, NoTokens names the table only
        self.assertEqual(status(ddb.query, TableName=table(), IndexName="due", KeyConditionExpression="due_pk = :p", ExpressionAttributeValues={":p": {"S": "due#3"}}), 200)
        self.assertTrue(last_decisions(1)[0]["resource"].endswith("/index/due"))
        # the api may read tokens
        self.assertEqual(status(client("dynamodb", "api").get_item, TableName=table(), Key=item("tokens", "t1")), 200)

    def test_transactions_item_by_item(self) -> None:
        t = table()
        admin("dynamodb").put_item(TableName=t, Item=item("instance#tx", "job"))
        txn = [
            {"Put": {"TableName": t, "Item": item("instance#tx", "state", v="1")}},
            {"Update": {"TableName": t, "Key": item("instance#tx", "rev"), "UpdateExpression": "SET v = :v", "ExpressionAttributeValues": {":v": {"S": "2"}}}},
            {"Delete": {"TableName": t, "Key": item("instance#tx", "job"), "ConditionExpression": "attribute_exists(pk)"}},
        ]
        self.assertEqual(status(client("dynamodb", "worker").transact_write_items, TransactItems=txn), 200)
        ds = last_decisions(3)
        self.assertEqual([d["action"] for d in ds], ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"])
        self.assertTrue(all(d["allowed"] and d["sid"] == "State" for d in ds))
        # one item on the tokens partition: the whole transaction is refused
        bad = txn + [{"Put": {"TableName": t, "Item": item("tokens", "t2")}}]
        self.assertEqual(status(client("dynamodb", "worker").transact_write_items, TransactItems=bad), 403)
        self.assertEqual(last_decisions(1)[0]["sid"], "NoTokens")
        # a ConditionCheck item needs its own action, which no role has
        # (Vergence's transactions make none)
        check = [{"ConditionCheck": {"TableName": t, "Key": item("instance#tx", "state"), "ConditionExpression": "attribute_exists(pk)"}}]
        self.assertEqual(status(client("dynamodb", "worker").transact_write_items, TransactItems=txn[:1] + check), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["effect"]), ("dynamodb:ConditionCheckItem", "ImplicitDeny"))
        # the scheduler deletes nothing
        self.assertEqual(status(client("dynamodb", "scheduler").transact_write_items, TransactItems=txn), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["effect"]), ("dynamodb:DeleteItem", "ImplicitDeny"))
        # TransactGetItems: GetItem per item
        tg = [{"Get": {"TableName": t, "Key": item("instance#tx", "job")}}]
        self.assertEqual(status(client("dynamodb", "worker").transact_get_items, TransactItems=tg), 200)
        self.assertEqual(last_decisions(1)[0]["action"], "dynamodb:GetItem")

    def test_batch_write_per_item(self) -> None:
        w = client("dynamodb", "worker")
        ok = {table(): [{"PutRequest": {"Item": item("events#a", str(i))}} for i in range(3)]}
        self.assertEqual(status(w.batch_write_item, RequestItems=ok), 200)
        bad = {table(): ok[table()] + [{"DeleteRequest": {"Key": item("tokens", "z")}}]}
        self.assertEqual(status(w.batch_write_item, RequestItems=bad), 403)


class S3(unittest.TestCase):
    def presigned(self, who: str | dict[str, str], method: str, key: str, expires: int = 300) -> str:
        s3 = client("s3", who)
        op = {"PUT": "put_object", "GET": "get_object"}[method]
        return s3.generate_presigned_url(op, Params={"Bucket": bucket(), "Key": key}, ExpiresIn=expires)

    def http(self, method: str, url: str, body: bytes | None = None) -> tuple[int, bytes]:
        # (a PUT without a Content-Type gets urllib's form type, whose body werkzeug eats)
        req = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/octet-stream"})
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def test_presigned_put_and_get(self) -> None:
        key = "jobs/fetch-1/plan.bin"
        code, _ = self.http("PUT", self.presigned("worker", "PUT", key), b"the plan")
        self.assertEqual(code, 200)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["resource"], d["sid"]), ("s3:PutObject", f"arn:aws:s3:::{bucket()}/{key}", "Artifacts"))
        code, body = self.http("GET", self.presigned("api", "GET", key))
        self.assertEqual((code, body), (200, b"the plan"))
        # the scheduler may write notifications/ only
        self.assertEqual(self.http("PUT", self.presigned("scheduler", "PUT", key), b"x")[0], 403)
        # a role without s3:PutObject
        ro = role_with("reads-artifacts", [{"Sid": "Read", "Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket()}/*"}])
        self.assertEqual(self.http("PUT", self.presigned(ro, "PUT", key), b"x")[0], 403)
        self.assertEqual(last_decisions(1)[0]["effect"], "ImplicitDeny")
        self.assertEqual(self.http("GET", self.presigned(ro, "GET", key))[0], 200)
        # tampered and expired URLs
        url = self.presigned("worker", "GET", key)
        self.assertEqual(self.http("GET", url.replace("plan.bin", "plan.bim"))[0], 403)
        url = self.presigned("worker", "GET", key, expires=1)
        time.sleep(2)
        self.assertEqual(self.http("GET", url)[0], 403)

    def test_sdk_calls_and_the_bucket_policy(self) -> None:
        import authz

        s3 = client("s3", "scheduler")
        self.assertEqual(status(s3.put_object, Bucket=bucket(), Key="notifications/cursor", Body=b"1"), 200)
        self.assertEqual(status(s3.get_object, Bucket=bucket(), Key="notifications/cursor"), 200)
        self.assertEqual(status(s3.get_object, Bucket=bucket(), Key="jobs/x"), 403)
        authz.SETTINGS["secure_transport"] = False
        try:
            self.assertEqual(status(s3.get_object, Bucket=bucket(), Key="notifications/cursor"), 403)
            d = last_decisions(1)[0]
            self.assertEqual((d["effect"], d["sid"], d["policy"]), ("Deny", "TlsOnly", f"resource:bucket:{bucket()}"))
        finally:
            authz.SETTINGS["secure_transport"] = True


class SQS(unittest.TestCase):
    def test_send(self) -> None:
        res = STACK["resources"]
        api = client("sqs", "api")
        self.assertEqual(status(api.send_message, QueueUrl=res["WorkQueue"]["url"], MessageBody="{}"), 200)
        self.assertEqual(last_decisions(1)[0]["resource"], res["WorkQueue"]["arn"])
        self.assertEqual(status(api.send_message, QueueUrl=res["DeadLetterQueue"]["url"], MessageBody="{}"), 403)
        self.assertEqual(status(client("sqs", "worker").send_message_batch, QueueUrl=res["WorkQueue"]["url"],
                                Entries=[{"Id": "1", "MessageBody": "{}"}]), 200)
        self.assertEqual(last_decisions(1)[0]["action"], "sqs:SendMessage")
        # the event source mapping's calls, with the worker's role
        w = client("sqs", "worker")
        msgs = w.receive_message(QueueUrl=res["WorkQueue"]["url"], MaxNumberOfMessages=10).get("Messages", [])
        self.assertTrue(msgs, "moto's own SQS->Lambda delivery must not consume the messages")
        self.assertEqual(status(w.delete_message, QueueUrl=res["WorkQueue"]["url"], ReceiptHandle=msgs[0]["ReceiptHandle"]), 200)


class ECS(unittest.TestCase):
    def register(self, who: str | dict[str, str], task_role: str | None = None, tags: bool = True) -> tuple[int, str | None]:
        from botocore.exceptions import ClientError

        seeded = STACK["seeded"]
        try:
            out = client("ecs", who).register_task_definition(
                family="vergence-shop-deployer",
                networkMode="awsvpc",
                requiresCompatibilities=["FARGATE"],
                cpu="256",
                memory="512",
                taskRoleArn=task_role or seeded["taskRoleArn"],
                executionRoleArn=seeded["executionRoleArn"],
                containerDefinitions=[{"name": "job", "image": "busybox", "memory": 512, "essential": True}],
                **({"tags": [{"key": "vergence:runtime", "value": "shop-deployer"}]} if tags else {}),
            )
            return 200, out["taskDefinition"]["taskDefinitionArn"]
        except ClientError as e:
            return e.response["ResponseMetadata"]["HTTPStatusCode"], None

    def run_task(self, who: str, cluster: str, td: str) -> int:
        seeded = STACK["seeded"]
        return status(
            client("ecs", who).run_task,
            cluster=cluster, taskDefinition=td, launchType="FARGATE", startedBy="fetch-1",
            networkConfiguration={"awsvpcConfiguration": {"subnets": seeded["subnets"][:1], "securityGroups": seeded["securityGroups"]}},
            tags=[{"key": "vergence:job", "value": "fetch-1"}],
        )

    def test_worker_runs_tasks_in_its_cluster_only(self) -> None:
        code, td = self.register("worker")
        self.assertEqual(code, 200)
        ds = last_decisions(4)
        self.assertEqual([d["action"] for d in ds], ["ecs:RegisterTaskDefinition", "ecs:TagResource", "iam:PassRole", "iam:PassRole"])
        self.assertEqual([d["sid"] for d in ds], ["EcsTaskDefinitions", "EcsTagsOnCreate", "EcsPassRoles", "EcsPassRoles"])
        cluster = STACK["seeded"]["ecsCluster"]["arn"]
        self.assertEqual(self.run_task("worker", cluster, td), 200)
        d = [x for x in last_decisions(6) if x["action"] == "ecs:RunTask"][-1]
        self.assertEqual((d["resource"], d["context"]["ecs:cluster"], d["sid"]), (td, [cluster], "EcsTasks"))
        other = admin("ecs").create_cluster(clusterName="someone-elses")["cluster"]["clusterArn"]
        self.assertEqual(self.run_task("worker", other, td), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["effect"]), ("ecs:RunTask", "ImplicitDeny"))
        tasks = client("ecs", "worker").list_tasks(cluster=cluster, startedBy="fetch-1")["taskArns"]
        self.assertEqual(len(tasks), 1)
        self.assertEqual(status(client("ecs", "worker").describe_tasks, cluster=cluster, tasks=tasks), 200)
        self.assertEqual(status(client("ecs", "worker").stop_task, cluster=cluster, task=tasks[0]), 200)

    def test_pass_role_limited(self) -> None:
        stray = admin("iam").create_role(RoleName="stray", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ecs-tasks.amazonaws.com"}, "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
        code, _ = self.register("worker", task_role=stray)
        self.assertEqual(code, 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["resource"], d["effect"]), ("iam:PassRole", stray, "ImplicitDeny"))

    def test_create_service_needs_its_permission(self) -> None:
        code, td = self.register("worker")
        cluster = STACK["seeded"]["ecsCluster"]["arn"]
        args = dict(cluster=cluster, serviceName="web-prod", taskDefinition=td, desiredCount=1, launchType="FARGATE")
        # The api's role has no ECS rights at all.
        self.assertEqual(status(client("ecs", "api").create_service, **args), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["resource"]), ("ecs:CreateService", f"arn:aws:ecs:us-east-1:{account.ACCOUNT}:service/vergence-jobs/web-prod"))
        # The worker's may create services in the stack's clusters only.
        self.assertEqual(status(client("ecs", "worker").create_service, **args), 200)
        created = [d for d in last_decisions(5) if d["action"] == "ecs:CreateService"]
        self.assertEqual(created[-1]["sid"], "EcsServices")
        admin("ecs").create_cluster(clusterName="elsewhere")
        self.assertEqual(status(client("ecs", "worker").create_service, **{**args, "cluster": "elsewhere"}), 403)
        deployer = role_with("service-deployer", [
            {"Sid": "Services", "Effect": "Allow", "Action": ["ecs:CreateService", "ecs:UpdateService", "ecs:DescribeServices"], "Resource": f"arn:aws:ecs:us-east-1:{account.ACCOUNT}:service/vergence-jobs/*"},
            {"Sid": "Pass", "Effect": "Allow", "Action": "iam:PassRole", "Resource": "*", "Condition": {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}},
        ])
        self.assertEqual(status(client("ecs", deployer).create_service, **args), 200)
        self.assertEqual(status(client("ecs", deployer).describe_services, cluster=cluster, services=["web-prod"]), 200)
        # tags on CreateService need ecs:TagResource with ecs:CreateAction=CreateService
        self.assertEqual(status(client("ecs", deployer).create_service, **{**args, "serviceName": "web-staging"}, tags=[{"key": "a", "value": "b"}]), 403)
        d = last_decisions(1)[0]
        self.assertEqual((d["action"], d["context"]["ecs:CreateAction"]), ("ecs:TagResource", ["CreateService"]))

    def test_update_service_rolls_out_the_new_task_definition(self) -> None:
        _, first = self.register("worker")
        _, second = self.register("worker")
        self.assertNotEqual(first, second)
        cluster = STACK["seeded"]["ecsCluster"]["arn"]
        ecs = client("ecs", "worker")
        ecs.create_service(cluster=cluster, serviceName="web-rollout", taskDefinition=first, desiredCount=1, launchType="FARGATE")
        ecs.update_service(cluster=cluster, service="web-rollout", taskDefinition=second)
        service = ecs.describe_services(cluster=cluster, services=["web-rollout"])["services"][0]
        self.assertEqual(service["taskDefinition"], second)
        [primary] = service["deployments"]
        self.assertEqual((primary["status"], primary["taskDefinition"]), ("PRIMARY", second))


class Logs(unittest.TestCase):
    def test_job_logs(self) -> None:
        admin("logs").create_log_group(logGroupName="/vergence/jobs")
        admin("logs").create_log_stream(logGroupName="/vergence/jobs", logStreamName="job/job/abc")
        w = client("logs", "worker")
        self.assertEqual(status(w.get_log_events, logGroupName="/vergence/jobs", logStreamName="job/job/abc"), 200)
        d = last_decisions(1)[0]
        self.assertEqual((d["resource"], d["sid"]), (f"arn:aws:logs:us-east-1:{account.ACCOUNT}:log-group:/vergence/jobs:log-stream:job/job/abc", "EcsJobLogs"))
        self.assertEqual(status(client("logs", "api").get_log_events, logGroupName="/vergence/jobs", logStreamName="job/job/abc"), 403)
        # CreateLogGroup: the job log group's own statement, in the ARN form
        # AWS checks (log-group:NAME:*)
        self.assertIn(status(w.create_log_group, logGroupName="/vergence/jobs"), (200, 400))
        d = last_decisions(1)[0]
        self.assertEqual((d["resource"], d["sid"]), (f"arn:aws:logs:us-east-1:{account.ACCOUNT}:log-group:/vergence/jobs:*", "EcsJobLogGroup"))


class Lambda(unittest.TestCase):
    """The worker's LambdaJobs grant: the seeded jobs function (the stack's
    LambdaFunctionArns) and its versions and aliases, nothing else; an
    authorized invocation is handed to --lambda-endpoint."""

    def test_worker_invokes_the_jobs_function_only(self) -> None:
        import http.server
        import threading

        seen: list[tuple[str, str | None]] = []

        class Invoke(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((self.path, self.headers.get("X-Amz-Invocation-Type")))
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Invoke)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        account.forward_invocations(f"http://127.0.0.1:{server.server_address[1]}")
        try:
            jobs = STACK["seeded"]["jobsFunction"]
            w = client("lambda", "worker")
            self.assertEqual(status(w.invoke, FunctionName=jobs["arn"], InvocationType="Event", Payload=b"{}"), 202)
            d = last_decisions(1)[0]
            self.assertEqual((d["action"], d["resource"], d["sid"]), ("lambda:InvokeFunction", jobs["arn"], "LambdaJobs"))
            self.assertEqual(seen, [(f"/2015-03-31/functions/{jobs['name']}/invocations", "Event")])
            # A qualifier is checked as ARN:QUALIFIER, which `ARN:*` grants.
            admin("lambda").create_alias(FunctionName=jobs["name"], Name="live", FunctionVersion="$LATEST")
            self.assertEqual(status(w.invoke, FunctionName=jobs["name"], Qualifier="live", InvocationType="Event", Payload=b"{}"), 202)
            self.assertEqual(last_decisions(1)[0]["resource"], f"{jobs['arn']}:live")
            # Another function, or another role: refused.
            self.assertEqual(status(w.invoke, FunctionName="someone-elses", InvocationType="Event", Payload=b"{}"), 403)
            d = last_decisions(1)[0]
            self.assertEqual((d["action"], d["resource"], d["effect"]), ("lambda:InvokeFunction", f"arn:aws:lambda:us-east-1:{account.ACCOUNT}:function:someone-elses", "ImplicitDeny"))
            self.assertEqual(status(client("lambda", "api").invoke, FunctionName=jobs["arn"], InvocationType="Event", Payload=b"{}"), 403)
            self.assertEqual(len(seen), 2)
        finally:
            account.forward_invocations(None)
            server.shutdown()


class CloudWatch(unittest.TestCase):
    """cloudwatchAlarm protections: the worker reads alarm states
    (ProtectionAlarms) and may change nothing of CloudWatch; the api
    function may not read them."""

    def test_worker_reads_alarms_and_nothing_more(self) -> None:
        name = "vergence-protection-5xx"
        admin("cloudwatch").put_metric_alarm(
            AlarmName=name, Namespace="Shop", MetricName="Errors", Statistic="Sum",
            Period=60, EvaluationPeriods=1, Threshold=5.0, ComparisonOperator="GreaterThanThreshold",
        )
        w = client("cloudwatch", "worker")
        self.assertEqual(status(w.describe_alarms, AlarmNames=[name]), 200)
        d = last_decisions(1)[0]
        self.assertEqual(
            (d["action"], d["sid"], d["resource"]),
            ("cloudwatch:DescribeAlarms", "ProtectionAlarms", f"arn:aws:cloudwatch:us-east-1:{account.ACCOUNT}:alarm:{name}"),
        )
        self.assertEqual(status(w.set_alarm_state, AlarmName=name, StateValue="OK", StateReason="x"), 403)
        self.assertEqual(status(client("cloudwatch", "api").describe_alarms, AlarmNames=[name]), 403)


class Secrets(unittest.TestCase):
    def test_parameters_and_secrets(self) -> None:
        s = STACK["seeded"]["notificationSecret"]
        r = role_with("reads-secrets", [
            {"Sid": "Param", "Effect": "Allow", "Action": "ssm:GetParameter", "Resource": f"arn:aws:ssm:us-east-1:{account.ACCOUNT}:parameter/vergence/*"},
            {"Sid": "Secret", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": f"arn:aws:secretsmanager:us-east-1:{account.ACCOUNT}:secret:vergence/notifications/signing-secret-??????"},
        ])
        self.assertEqual(client("ssm", r).get_parameter(Name=s["ssmParameterName"], WithDecryption=True)["Parameter"]["Value"], s["value"])
        self.assertEqual(last_decisions(1)[0]["resource"], s["ssmParameterArn"])
        self.assertEqual(client("secretsmanager", r).get_secret_value(SecretId=s["secretName"])["SecretString"], s["value"])
        self.assertEqual(last_decisions(1)[0]["resource"], s["secretArn"])
        self.assertEqual(status(client("secretsmanager", "worker").get_secret_value, SecretId=s["secretName"]), 403)


class Account(unittest.TestCase):
    def test_contract(self) -> None:
        self.assertEqual(set(STACK["functions"]), {"api", "scheduler", "worker"})
        w = fn("worker")
        self.assertEqual((w["timeoutSeconds"], w["memoryMb"]), (300, 256))
        self.assertEqual(w["environment"]["VERGENCE_TABLE"], table())
        self.assertEqual([e["type"] for e in w["events"]], ["SQS"])
        self.assertEqual(w["events"][0]["queueArn"], STACK["resources"]["WorkQueue"]["arn"])
        self.assertEqual([e["type"] for e in fn("scheduler")["events"]], ["ScheduleV2"])
        self.assertEqual(sorted(e["routeKey"] for e in fn("api")["events"]), ["ANY /{proxy+}", "GET /"])
        api_id = STACK["resources"]["HttpApi"]["physicalId"]
        self.assertEqual(STACK["outputs"]["ApiUrl"], f"https://{api_id}.execute-api.us-east-1.amazonaws.com")
        self.assertEqual(fn("scheduler")["environment"]["VERGENCE_PUBLIC_URL"], STACK["outputs"]["ApiUrl"])

    def test_function_url(self) -> None:
        """The api function's URL (vergence-agent polls there): public, so
        the API authenticates every request itself; and invocable only
        through the URL, with both actions AWS requires since October 2025."""
        url = STACK["resources"]["ApiFunctionUrl"]
        self.assertEqual((url["type"], url["authType"], url["targetArn"]), ("AWS::Lambda::Url", "NONE", fn("api")["arn"]))
        self.assertRegex(STACK["outputs"]["AgentUrl"], r"^https://[0-9a-f]{32}\.lambda-url\.us-east-1\.on\.aws/$")
        self.assertEqual(STACK["outputs"]["AgentUrl"], url["url"])
        assert ACCT is not None
        policy = json.loads(ACCT.client("lambda").get_policy(FunctionName=fn("api")["name"])["Policy"])
        public = {s["Action"]: s.get("Condition") for s in policy["Statement"] if s.get("Principal") in ("*", {"AWS": "*"})}
        self.assertEqual(set(public), {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}, policy)

    def test_admin_cannot_assume_function_roles(self) -> None:
        self.assertEqual(status(admin("sts").assume_role, RoleArn=fn("worker")["role"]["arn"], RoleSessionName="admin-session"), 403)
        self.assertEqual(last_decisions(1)[0]["policy"], "trust-policy")

    def test_decisions_endpoint(self) -> None:
        assert ACCT is not None
        client("dynamodb", "api").get_item(TableName=table(), Key=item("a"))
        with urllib.request.urlopen(f"{ACCT.endpoint}/_stack/decisions?caller={fn('api')['role']['name']}") as r:
            ds = json.load(r)["decisions"]
        self.assertEqual(ds[-1]["action"], "dynamodb:GetItem")
        with urllib.request.urlopen(urllib.request.Request(f"{ACCT.endpoint}/_stack/decisions/reset", method="POST")) as r:
            self.assertEqual(r.status, 200)
        with urllib.request.urlopen(f"{ACCT.endpoint}/_stack/decisions") as r:
            self.assertEqual(json.load(r)["decisions"], [])
        with urllib.request.urlopen(f"{ACCT.endpoint}/_stack/stack.json") as r:
            self.assertEqual(json.load(r)["endpoint"], ACCT.endpoint)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(f"{ACCT.endpoint}/moto-api/reset", method="POST"))
        self.assertEqual(e.exception.code, 409)


def print_grants() -> None:
    for name, f in sorted(STACK["functions"].items()):
        print(f"{name} ({f['role']['name']}):")
        for g in f["granted"]:
            what = g.get("actions") or [f"NOT {a}" for a in g.get("notActions", [])]
            where = g.get("resources") or [f"NOT {r}" for r in g.get("notResources", [])]
            cond = f" if {json.dumps(g['conditions'])}" if g["conditions"] else ""
            sid = g["sid"] or g["policy"].rsplit("/", 1)[-1]
            print(f"  {g['effect']:5} {sid}: {', '.join(what)} on {', '.join(where)}{cond}")


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=2 if "-v" in sys.argv else 1)
    if STACK:
        print()
        print_grants()
    sys.exit(0 if prog.result.wasSuccessful() else 1)
