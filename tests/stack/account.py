#!/usr/bin/env python3
"""An AWS account for the serverless functions' tests: template.yaml deployed
into one moto server, with IAM enforced the way AWS enforces it.

README
======

What it does
------------
One long-running process:

1. starts moto 5.2.5's server in this process on 127.0.0.1 (`--port`, 0 =
   a free one) with IAM enforcement on: the first 3 requests (create the
   `admin` user, its inline `*` policy, its access key) are not checked
   (`INITIAL_NO_AUTH_ACTION_COUNT=3`), every later one is authenticated
   (moto's SigV4 check; presigned URLs verified here) and authorized by a
   faithful IAM policy evaluator (policy.py, authz.py) instead of moto's;
   an UpdateService to another task definition rolls it out as ECS does
   (a new PRIMARY deployment of it; moto keeps the first one forever);
2. seeds what the flows need (as the admin): an ECS cluster (`--ecs-cluster`),
   a task role and an execution role for its tasks, a notification signing
   secret in SSM Parameter Store and in Secrets Manager, and a Lambda function
   for `runner: lambda` jobs (`vergence-wrapper`, run behind `--lambda-endpoint`);
3. expands `--template` with aws-sam-translator and creates its resources
   from the expanded template (deploy.py): moto's CloudFormation for the
   types it implements, API calls for the others;
4. assumes each function's role, as the Lambda service does, and writes
   everything to `--out` (the contract below); prints `ready <path>` on
   stdout; serves until SIGTERM/SIGINT.

Command line (from the repository root; needs `pip install 'moto[server]==5.2.5' aws-sam-translator`):

    python3 tests/stack/account.py --out target/stack.json [--port 0]
        [--template template.yaml] [--region us-east-1] [--stack-name vergence]
        [--param Name=Value ...]     # template parameters; defaults below
        [--ecs-cluster vergence-jobs] [--lambda-endpoint URL] [--insecure-transport] [-v]

Template parameters passed by default (each can be overridden with
`--param`, e.g. `--param EcsClusterArns=` for a stack without ECS):
`EcsClusterArns` = the seeded cluster's ARN, `EcsPassRoleArns` = the seeded
task and execution roles' ARNs, `NotificationParameterPath` =
/vergence/notifications (where the seeded parameter is) and
`NotificationSecretArns` = the seeded secret's ARN, `LambdaFunctionArns` =
the seeded jobs function's ARN; the others keep the template's defaults.
The jobs function (`vergence-wrapper`, for `runner: lambda`) runs behind
`--lambda-endpoint` (`cargo lambda watch`): an authorized Invoke of it is
handed there (forward_invocations).

HTTP, on the same port as the AWS APIs
--------------------------------------
- `GET /_stack/decisions[?since=SEQ][&caller=NAME][&denied=1]`: every
  authorization decision so far, oldest first: `{"decisions": [{"seq",
  "time", "caller" (role name for assumed-role credentials, user name
  otherwise), "callerKind" ("role"|"user"), "operation" ("dynamodb:Query"),
  "action" ("dynamodb:Query"), "resource" (ARN or "*"), "allowed",
  "effect" ("Allow"|"Deny"|"ImplicitDeny"), "sid" (the deciding statement's
  Sid, null for an implicit deny or a statement without one), "policy"
  ("inline:<name>", a managed policy ARN, "resource:bucket:<name>",
  "resource:queue:<name>", "trust-policy"), "context" (the request's
  service condition keys, e.g. dynamodb:LeadingKeys), "fallback" (true:
  no resource mapping for this operation, checked as moto's action name
  on "*"), "note"}]}`. One request can make several decisions
  (TransactWriteItems: one per item; RunTask: the task definition, the tags,
  each passed role); it is refused at the first denied one.
- `POST /_stack/decisions/reset`: clears them.
- `GET /_stack/stack.json`: the contract document below.
- `POST /_stack/platform/ecs-task-stopped` `{"taskArn", "exitCode",
  "stdout": [lines]}`: what AWS does when a job's task ends — the lines
  in the task's awslogs stream, the task stopped, and the "ECS Task State
  Change" event put on the default bus, where the template's rule routes
  it by its own pattern (as the admin: this is the platform, not a
  function).
- `POST /moto-api/reset` is refused (409): it would delete the account
  (users, roles, the stack). Everything else under /moto-api/ is moto's.

The contract (`--out`)
----------------------
    {"endpoint": "http://127.0.0.1:PORT", "region": "us-east-1", "account": "123456789012",
     "stackName": "vergence", "secureTransport": true,
     "admin": {"userName": "admin", "accessKeyId", "secretAccessKey"},
     "functions": {"api"|"scheduler"|"worker": {      # BuildProperties.Binary, else the logical id
         "logicalId", "name", "arn", "timeoutSeconds", "memoryMb", "runtime", "handler",
         "architectures", "reservedConcurrency",
         "environment": {...},                       # the function's resolved Environment.Variables
         "role": {"name", "arn"},
         "credentials": {"accessKeyId", "secretAccessKey", "sessionToken", "expiration"},
         "granted": [{"policy", "sid", "effect", "actions" | "notActions",
                      "resources" | "notResources", "conditions"}],   # every statement of every policy of its role
         "events": [
           {"type": "SQS", "logicalId", "uuid", "queueArn", "queueUrl", "batchSize",
            "maximumBatchingWindowInSeconds", "functionResponseTypes", "enabled"},
           {"type": "ScheduleV2", "logicalId", "name", "arn", "expression", "roleArn",
            "retryPolicy", "flexibleTimeWindow", "state"},
           {"type": "HttpApi", "apiLogicalId", "apiId", "routeKey", "path", "method",
            "payloadFormatVersion", "stage"}]}},
     "resources": {"<LogicalId>": {"type", "createdBy": "cloudformation"|"api"|"skipped (condition false)",
                                   "physicalId", "arn"?, "url"? (queues), "name"? (queues)}},
     "outputs": {"ApiUrl": ..., ...},                 # the template's Outputs, resolved
     "parameters": {...},                             # the template parameters used
     "seeded": {"ecsCluster": {"name", "arn"}, "taskRoleArn", "executionRoleArn",
                "subnets": [...], "securityGroups": [...],      # the default VPC's, for RunTask
                "notificationSecret": {"value", "ssmParameterName", "ssmParameterArn",
                                       "secretName", "secretArn"},
                "codeBucket", "jobsFunction": {"name", "arn"}}}

Notes for the harness:
- Give each function process only its `credentials` (AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), AWS_REGION, AWS_ENDPOINT_URL =
  `endpoint`, its `environment`, and VERGENCE_S3_PATH_STYLE=true (the
  functions' own switch for S3 stand-ins: virtual-host addressing would
  put the bucket in the host name). The event source
  mapping is the harness's to emulate: poll `queueUrl` with the worker's own
  credentials, as Lambda does with the execution role (its
  AWSLambdaSQSQueueExecutionRole grants sqs:ReceiveMessage/DeleteMessage/
  GetQueueAttributes). moto's own SQS->Lambda delivery is detached from the
  queue (moto would otherwise try to run the function on every send).
- Presigned URLs: SigV4 query signing only (what the SDKs produce); the
  signature, the session token and X-Amz-Expires are checked. A PUT whose
  Content-Type is application/x-www-form-urlencoded loses its body in
  moto's server (werkzeug parses it as a form): send octet-stream.
- Requests that fail authentication (unknown key, wrong session token,
  bad signature) are recorded too, with caller null and a note.
- The decision log is cleared once the account is ready: it starts with
  the harness's first request.
- Session credentials come from moto's STS (1 hour by the clock in
  `expiration`; moto does not expire them).
- AccessDenied answers are HTTP 403: `{"__type": "AccessDeniedException",
  "message": ...}` for JSON protocols (real DynamoDB/ECS/Logs answer 400
  with that body), moto's XML AccessDenied otherwise. The decision log is
  the judge, not the status code.
- aws:SecureTransport is "true" for every request: the http:// loopback
  endpoint stands for AWS's TLS endpoints (as if TLS were terminated in
  front of it). The template's bucket policy (Deny s3:* when
  aws:SecureTransport is false) is evaluated, not ignored;
  `--insecure-transport` sets it to "false", and then every S3 call is
  denied by TlsOnly, as AWS would do to plain HTTP.
- Function roles are assumed the way Lambda does it: by the Lambda service
  principal (moto's STS backend, in process), since the roles trust only
  lambda.amazonaws.com. The admin user calling sts:AssumeRole on them is
  refused by the trust policy, as in AWS.

IAM semantics, and where they simplify
--------------------------------------
policy.py's docstring lists the evaluation rules and simplifications (no
SCPs, boundaries or session policies; unqualified operators on multivalued
keys; account principals in resource policies; Date* operators). authz.py
maps each request to AWS's checks; per service:
- DynamoDB: the table or `table/X/index/Y` ARN; dynamodb:LeadingKeys from
  the Key/Item (key schema read from moto) or the Query's key condition
  (for an index: the index's partition key); Batch*: one check per item;
  TransactWriteItems/TransactGetItems: each item as its own PutItem/
  UpdateItem/DeleteItem/ConditionCheckItem/GetItem (AWS has no
  dynamodb:Transact* permissions).
- SQS: the queue ARN; *Batch as the single action; the queue policy is
  evaluated as the resource policy.
- S3: bucket / object ARNs (moto's action names mapped to IAM's:
  ListObjectsV2 -> s3:ListBucket, HeadObject -> s3:GetObject, ...), s3:prefix
  for listings; the bucket policy is evaluated as the resource policy.
- ECS: RegisterTaskDefinition and DescribeTaskDefinition on "*"; RunTask on
  the task definition ARN; StopTask/DescribeTasks on task ARNs;
  ListTasks on `container-instance/<cluster>/*`; services on
  `service/<cluster>/<name>`; all with ecs:cluster. Tags in a create request
  add ecs:TagResource with ecs:CreateAction (RunTask: on
  `task/<cluster>/*`, the task's id being unknown before it exists).
  Roles given to tasks add iam:PassRole with iam:PassedToService.
- Logs: `log-group:G:log-stream:S` for stream actions (GetLogEvents,
  PutLogEvents, CreateLogStream); `log-group:G:*` for the other log-group
  actions (AWS: policies must name the `:*` form for them), the bare
  `log-group:G` for tagging.
- SSM: `parameter/<name without its leading />`; Secrets Manager: the
  secret's full ARN (with its random suffix), resolved from a name.
- STS AssumeRole: identity policy, then the role's trust policy (both
  required, even where AWS would take the trust policy alone).
- Anything else: moto's action name on "*", logged and marked `fallback`.

Resources, and how they are created (moto 5.2.5)
------------------------------------------------
Each resource's `createdBy` in the contract says which way it went.
moto's CloudFormation (CreateStack, then UpdateStack for the resources that
depend on API-created ones): AWS::DynamoDB::Table, AWS::S3::Bucket,
AWS::SQS::Queue, AWS::Events::Rule, AWS::IAM::Role, AWS::Lambda::Function,
AWS::Lambda::EventSourceMapping, AWS::Lambda::Permission.
Properties moto's CloudFormation accepts but ignores are then applied by API
from the same resolved properties (`propertiesByApi`): Role
ManagedPolicyArns, Table TimeToLiveSpecification and
PointInTimeRecoverySpecification, Bucket PublicAccessBlockConfiguration,
OwnershipControls and LifecycleConfiguration.
API calls (moto's CloudFormation does not implement them):
AWS::S3::BucketPolicy (PutBucketPolicy), AWS::SQS::QueuePolicy
(SetQueueAttributes Policy), AWS::CloudWatch::Alarm (PutMetricAlarm),
AWS::Lambda::Url (CreateFunctionUrlConfig; the harness serves the URL),
AWS::ApiGatewayV2::Api (CreateApi + one CreateIntegration/CreateRoute per
OpenAPI path and method of its Body, as CloudFormation's import does),
AWS::ApiGatewayV2::Stage (CreateStage), AWS::Scheduler::Schedule
(CreateSchedule). A type in neither list stops the deployment with an error.
Lambda functions get a dummy code zip (never run by moto).

Files
-----
account.py (this), policy.py (the IAM evaluator, pure), authz.py (requests
-> checks, the patch into moto, the decision log), deploy.py (SAM expansion,
intrinsics, creation), test_account.py (self-test:
`python3 tests/stack/test_account.py [-v]`, about 30 s).

Python requirements (what this imports beyond the standard library):
    pip install 'moto[server]==5.2.5' aws-sam-translator
moto[server] brings boto3, botocore, werkzeug, flask and PyYAML (and
cfn-lint, which itself depends on aws-sam-translator; name it anyway).
Tried with moto 5.2.5, aws-sam-translator 1.115.0, boto3/botocore 1.44.8,
werkzeug 3.1.9, Python 3.11. authz.py patches moto internals
(ActionAuthenticatorMixin, IAMRequestBase, FakeBucket.get_permission):
keep moto pinned.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

ACCOUNT = "123456789012"
# DynamoDB requests to moto, one at a time (see `_wsgi`).
DYNAMODB_ONE_AT_A_TIME = threading.Lock()
BOOTSTRAP_REQUESTS = 3  # CreateUser, PutUserPolicy, CreateAccessKey
ADMIN = "admin"
NOTIFICATION_SECRET_NAME = "vergence/notifications/signing-secret"
NOTIFICATION_PARAMETER_PATH = "/vergence/notifications"
NOTIFICATION_PARAMETER_NAME = f"{NOTIFICATION_PARAMETER_PATH}/signing-secret"
NOTIFICATION_SECRET_VALUE = "test-notification-signing-secret"
TASK_ROLE = "vergence-job-task"
EXECUTION_ROLE = "vergence-job-execution"
CODE_BUCKET = "vergence-code"
# The function `runner: lambda` jobs run in: `cargo lambda watch` serves
# only the workspace's binary names, and vergence-wrapper is the one it runs.
JOBS_FUNCTION = "vergence-wrapper"
JOBS_FUNCTION_ROLE = "vergence-jobs-function"

log = logging.getLogger("stack")


def _prepare_environment(region: str) -> None:
    """Before moto is imported."""
    os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"
    os.environ["AWS_DEFAULT_REGION"] = region
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bootstrap")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bootstrap")
    os.environ.pop("AWS_PROFILE", None)
    os.environ["MOTO_ALLOW_NONEXISTENT_REGION"] = "false"


def _roll_out_service_updates() -> None:
    """UpdateService to another task definition rolls it out, as ECS does.

    moto keeps a service's first deployment forever (its task definition
    too), so the ECS runtime's fetch, which reads the PRIMARY deployment,
    would never see a second release. ECS starts a new PRIMARY deployment
    of the new task definition and, once its tasks run, drops the old one;
    here that happens at once, COMPLETED when MOTO_ECS_SERVICE_RUNNING
    tasks cover the desired count (the harness sets it high), as moto
    already does for CreateService.
    """
    from moto.ecs.models import EC2ContainerServiceBackend
    from moto.core.utils import utcnow
    from moto.moto_api._internal import mock_random

    original = EC2ContainerServiceBackend.update_service
    if getattr(original, "_vergence_rollout", False):
        return

    def update_service(self: Any, service_properties: dict[str, Any]) -> Any:
        changes_definition = service_properties.get("task_definition") is not None
        service = original(self, service_properties)
        if changes_definition and service.deployments:
            definition = self.describe_task_definition(service.task_definition)
            service.task_definition = definition.arn
            running = min(service.running_count, service.desired_count)
            deployment_id = f"ecs-svc/{mock_random.randint(0, 32**12)}"
            completed = running >= service.desired_count
            now = utcnow()
            service.deployments = [{
                **service.deployments[0],
                "id": deployment_id,
                "createdAt": now,
                "updatedAt": now,
                "desiredCount": service.desired_count,
                "runningCount": running,
                "pendingCount": service.desired_count - running,
                "rolloutState": "COMPLETED" if completed else "IN_PROGRESS",
                "rolloutStateReason": f"ECS deployment {deployment_id} {'completed' if completed else 'in progress'}.",
                "status": "PRIMARY",
                "taskDefinition": definition.arn,
            }]
        return service

    update_service._vergence_rollout = True  # type: ignore[attr-defined]
    EC2ContainerServiceBackend.update_service = update_service  # type: ignore[method-assign]


# ---------------------------------------------------------------- the server


class Account:
    """The moto server, the admin user and the deployed stack."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, region: str = "us-east-1", secure_transport: bool = True):
        _prepare_environment(region)
        from moto import settings
        from moto.core.authorization import ActionAuthenticatorMixin

        import authz

        settings.INITIAL_NO_AUTH_ACTION_COUNT = BOOTSTRAP_REQUESTS
        ActionAuthenticatorMixin.request_count = 0
        authz.install(secure_transport=secure_transport)
        _roll_out_service_updates()
        self.region = region
        self.secure_transport = secure_transport
        self.contract: dict[str, Any] = {}
        self._server = None
        self._start(host, port)
        self.admin = self._bootstrap()

    # ---- HTTP

    def _wsgi(self, app: Any) -> Any:
        import authz

        def respond(start_response: Any, status: str, body: Any) -> list[bytes]:
            data = json.dumps(body, indent=1, default=str).encode()
            start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
            return [data]

        def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
            from urllib.parse import parse_qs

            path = environ.get("PATH_INFO", "")
            method = environ.get("REQUEST_METHOD", "GET")
            if path == "/_stack/decisions" and method == "GET":
                q = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
                out = authz.decisions_snapshot()
                if "since" in q:
                    out = [d for d in out if d["seq"] > int(q["since"])]
                if "caller" in q:
                    out = [d for d in out if d["caller"] == q["caller"]]
                if q.get("denied") in ("1", "true"):
                    out = [d for d in out if not d["allowed"]]
                return respond(start_response, "200 OK", {"decisions": out})
            if path == "/_stack/decisions/reset" and method == "POST":
                authz.reset_decisions()
                return respond(start_response, "200 OK", {"reset": True})
            if path == "/_stack/stack.json" and method == "GET":
                return respond(start_response, "200 OK", self.contract)
            if path == "/_stack/platform/ecs-task-stopped" and method == "POST":
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(length) or b"{}")
                try:
                    return respond(start_response, "200 OK", self.ecs_task_stopped(body))
                except Exception as e:  # the test shows why
                    return respond(start_response, "500 Internal Server Error", {"error": repr(e)})
            if path.rstrip("/") == "/moto-api/reset":
                return respond(start_response, "409 Conflict", {"error": "moto-api/reset would delete the account (users, roles, stack); restart account.py instead"})
            if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
                # moto (5.2.5) runs TransactWriteItems without a lock: it
                # snapshots the whole table first and, when a condition
                # fails, puts the snapshot back, erasing whatever other
                # requests wrote meanwhile (a release pushed while a
                # worker's commit lost its race came back as the config's
                # version). DynamoDB is atomic per request; one request at
                # a time makes moto so too.
                with DYNAMODB_ONE_AT_A_TIME:
                    return list(app(environ, start_response))
            return app(environ, start_response)

        return wsgi

    def _start(self, host: str, port: int) -> None:
        from werkzeug.serving import make_server

        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(host, port, self._wsgi(app), threaded=True, request_handler=MotoRequestHandler)
        self.host, self.port = self._server.server_address[:2]
        self.endpoint = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()

    # ---- clients

    def session(self, key: dict[str, str]) -> Any:
        import boto3

        return boto3.Session(
            aws_access_key_id=key["accessKeyId"],
            aws_secret_access_key=key["secretAccessKey"],
            aws_session_token=key.get("sessionToken"),
            region_name=self.region,
        )

    def client(self, service: str, key: dict[str, str] | None = None, **kw: Any) -> Any:
        """A boto3 client for this endpoint (cached per service and key)."""
        key = key or self.admin
        cache_key = (service, key["accessKeyId"], json.dumps(kw, sort_keys=True))
        cache = self.__dict__.setdefault("_clients", {})
        if cache_key not in cache:
            cache[cache_key] = self._client(service, key, **kw)
        return cache[cache_key]

    def _client(self, service: str, key: dict[str, str], **kw: Any) -> Any:
        from botocore.config import Config

        if service == "s3":
            kw.setdefault("signature_version", "s3v4")  # boto3 presigns with SigV2 otherwise
            kw.setdefault("s3", {"addressing_style": "path"})
        return self.session(key).client(service, endpoint_url=self.endpoint, config=Config(retries={"max_attempts": 1}, **kw))

    def _bootstrap(self) -> dict[str, str]:
        """The only unauthenticated requests: the admin user and its key."""
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=self.region, aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName=ADMIN)
        iam.put_user_policy(
            UserName=ADMIN,
            PolicyName="everything",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{"Sid": "Admin", "Effect": "Allow", "Action": "*", "Resource": "*"}]}),
        )
        k = iam.create_access_key(UserName=ADMIN)["AccessKey"]
        return {"userName": ADMIN, "accessKeyId": k["AccessKeyId"], "secretAccessKey": k["SecretAccessKey"]}

    # ---- the platform around a task

    def ecs_task_stopped(self, body: dict[str, Any]) -> dict[str, Any]:
        """What AWS does when a task of a job ends, played for `taskArn`:
        the container's output lands in its awslogs stream (the driver's
        `prefix/container/task-id` name, from the task definition), the
        task stops, and ECS puts an "ECS Task State Change" event on the
        default bus, where the template's rule routes it (or not) by its
        own pattern. `stdout` is the output's lines; `exitCode` the
        container's exit code."""
        ecs = self.client("ecs")
        logs = self.client("logs")
        events = self.client("events")
        arn = body["taskArn"]
        cluster = arn.split(":task/")[1].split("/")[0]
        task = ecs.describe_tasks(cluster=cluster, tasks=[arn])["tasks"][0]
        definition = ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
        container = definition["containerDefinitions"][0]
        options = (container.get("logConfiguration") or {}).get("options") or {}
        group = options.get("awslogs-group")
        if group:
            stream = f"{options.get('awslogs-stream-prefix', 'ecs')}/{container['name']}/{arn.rsplit('/', 1)[1]}"
            try:
                logs.create_log_group(logGroupName=group)
            except logs.exceptions.ResourceAlreadyExistsException:
                pass
            logs.create_log_stream(logGroupName=group, logStreamName=stream)
            lines = body.get("stdout") or []
            if lines:
                now = int(time.time() * 1000)
                logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=[{"timestamp": now, "message": line} for line in lines])
        ecs.stop_task(cluster=cluster, task=arn, reason="Essential container in task exited")
        for _ in range(10):  # moto moves a stopping task one state per describe
            task = ecs.describe_tasks(cluster=cluster, tasks=[arn])["tasks"][0]
            if task["lastStatus"] == "STOPPED":
                break
        detail = {
            "taskArn": arn,
            "clusterArn": task["clusterArn"],
            "lastStatus": "STOPPED",
            "desiredStatus": "STOPPED",
            "taskDefinitionArn": task["taskDefinitionArn"],
            "startedBy": task.get("startedBy", ""),
            "stopCode": "EssentialContainerExited",
            "containers": [{"name": container["name"], "exitCode": int(body.get("exitCode", 0)), "lastStatus": "STOPPED"}],
        }
        put = events.put_events(Entries=[{"Source": "aws.ecs", "DetailType": "ECS Task State Change", "Resources": [arn], "Detail": json.dumps(detail)}])
        return {"stopped": task["lastStatus"], "failedEntryCount": put["FailedEntryCount"], "logGroup": group}

    # ---- roles, as a service assumes them

    def assume_as_service(self, role_arn: str, session_name: str, duration: int = 3600) -> dict[str, str]:
        """What Lambda (or ECS) does with an execution role: sts:AssumeRole
        as the service principal the role trusts. The role's trust policy is
        checked here for that principal; the admin user could not assume it."""
        from moto.iam.models import iam_backends
        from moto.sts.models import sts_backends

        from policy import as_list

        role = iam_backends[ACCOUNT]["aws"].get_role_by_arn(role_arn)
        trust = json.loads(role.assume_role_policy_document) if isinstance(role.assume_role_policy_document, str) else role.assume_role_policy_document
        services = set()
        for st in as_list(trust.get("Statement")):
            if st.get("Effect") == "Allow" and "sts:AssumeRole" in as_list(st.get("Action")):
                services |= set(as_list((st.get("Principal") or {}).get("Service")))
        if not services:
            raise RuntimeError(f"{role_arn} trusts no service principal")
        r = sts_backends[ACCOUNT]["aws"].assume_role(
            region_name=self.region, role_session_name=session_name, role_arn=role_arn, policy=None, duration=duration, external_id=None
        )
        return {
            "accessKeyId": r.access_key_id,
            "secretAccessKey": r.secret_access_key,
            "sessionToken": r.session_token,
            "expiration": r.expiration.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "assumedBy": sorted(services)[0],
        }


# ---------------------------------------------------------------- seeding


def seed(acct: Account, cluster_name: str) -> dict[str, Any]:
    ecs = acct.client("ecs")
    cluster = ecs.create_cluster(clusterName=cluster_name)["cluster"]
    iam = acct.client("iam")
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ecs-tasks.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    task_role = iam.create_role(RoleName=TASK_ROLE, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    exec_role = iam.create_role(RoleName=EXECUTION_ROLE, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
    iam.attach_role_policy(RoleName=EXECUTION_ROLE, PolicyArn="arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy")
    ssm = acct.client("ssm")
    ssm.put_parameter(Name=NOTIFICATION_PARAMETER_NAME, Value=NOTIFICATION_SECRET_VALUE, Type="SecureString")
    param_arn = ssm.get_parameter(Name=NOTIFICATION_PARAMETER_NAME)["Parameter"]["ARN"]
    sm = acct.client("secretsmanager")
    secret_arn = sm.create_secret(Name=NOTIFICATION_SECRET_NAME, SecretString=NOTIFICATION_SECRET_VALUE)["ARN"]
    # The execution role reads the job secrets (ECS's valueFrom), as docs/runners/ecs.md asks.
    iam.put_role_policy(
        RoleName=EXECUTION_ROLE,
        PolicyName="JobSecrets",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
            {"Sid": "JobSecrets", "Effect": "Allow", "Action": ["secretsmanager:GetSecretValue", "ssm:GetParameters"], "Resource": [secret_arn, param_arn]}]}),
    )
    ec2 = acct.client("ec2")
    vpc = [v for v in ec2.describe_vpcs()["Vpcs"] if v.get("IsDefault")][0]["VpcId"]
    subnets = [s["SubnetId"] for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]]
    sgs = [g["GroupId"] for g in ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}])["SecurityGroups"]]
    s3 = acct.client("s3")
    s3.create_bucket(Bucket=CODE_BUCKET)
    # The user's Lambda function for `runner: lambda` jobs (its code runs
    # behind --lambda-endpoint, see forward_invocations).
    lambda_trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    jobs_role = iam.create_role(RoleName=JOBS_FUNCTION_ROLE, AssumeRolePolicyDocument=json.dumps(lambda_trust))["Role"]["Arn"]
    import deploy

    jobs_function = acct.client("lambda").create_function(
        FunctionName=JOBS_FUNCTION, Runtime="provided.al2023", Role=jobs_role, Handler="bootstrap",
        Code={"ZipFile": deploy.dummy_zip()}, Timeout=900,
    )
    return {
        "ecsCluster": {"name": cluster["clusterName"], "arn": cluster["clusterArn"]},
        "taskRoleArn": task_role,
        "executionRoleArn": exec_role,
        "subnets": subnets,
        "securityGroups": sgs,
        "notificationSecret": {
            "value": NOTIFICATION_SECRET_VALUE,
            "ssmParameterName": NOTIFICATION_PARAMETER_NAME,
            "ssmParameterArn": param_arn,
            "secretName": NOTIFICATION_SECRET_NAME,
            "secretArn": secret_arn,
        },
        "codeBucket": CODE_BUCKET,
        "jobsFunction": {"name": jobs_function["FunctionName"], "arn": jobs_function["FunctionArn"]},
    }


# ---------------------------------------------------------------- reading the account back


def role_statements(role_name: str) -> list[dict[str, Any]]:
    """Every statement of every policy of a role, as moto holds them (what
    the evaluator enforces)."""
    from moto.iam.models import iam_backends

    import authz
    from policy import as_list, policy_statements

    backend = iam_backends[ACCOUNT]["aws"]
    out = []
    docs = []
    for name in backend.list_role_policies(role_name):
        _, doc = backend.get_role_policy(role_name, name)
        docs.append((f"inline:{name}", authz.load_document(doc)))
    attached, _ = backend.list_attached_role_policies(role_name)
    for p in attached:
        docs.append((p.arn, authz._policy_doc(p)))
    for label, doc in docs:
        for st in policy_statements(doc):
            entry: dict[str, Any] = {"policy": label, "sid": st.get("Sid"), "effect": st.get("Effect")}
            for k, key in (("Action", "actions"), ("NotAction", "notActions"), ("Resource", "resources"), ("NotResource", "notResources")):
                if k in st:
                    entry[key] = as_list(st[k])
            entry["conditions"] = st.get("Condition", {})
            out.append(entry)
    return out


def _ref_target(node: Any) -> str | None:
    if isinstance(node, dict):
        if "Ref" in node:
            return node["Ref"]
        if "Fn::GetAtt" in node:
            v = node["Fn::GetAtt"]
            return v.split(".", 1)[0] if isinstance(v, str) else v[0]
    return None


def function_events(dep: Any, logical: str) -> list[dict[str, Any]]:
    """The function's triggers, from the expanded template's own resources."""
    import re

    t = dep.template["Resources"]
    r = dep.resolver
    events: list[dict[str, Any]] = []
    for lid, res in t.items():
        if dep.created_by.get(lid, "").startswith("skipped"):
            continue
        props = res.get("Properties", {})
        if res["Type"] == "AWS::Lambda::EventSourceMapping" and _ref_target(props.get("FunctionName")) == logical:
            p = r.resolve(props)
            arn = p["EventSourceArn"]
            entry = {
                "type": "SQS" if ":sqs:" in arn else "EventSourceMapping",
                "logicalId": lid,
                "uuid": dep.value(lid),
                "queueArn": arn,
                "batchSize": p.get("BatchSize", 10),
                "maximumBatchingWindowInSeconds": p.get("MaximumBatchingWindowInSeconds", 0),
                "functionResponseTypes": p.get("FunctionResponseTypes", []),
                "enabled": p.get("Enabled", True),
            }
            if ":sqs:" in arn:
                entry["queueUrl"] = f"{dep.endpoint}/{ACCOUNT}/{arn.split(':')[-1]}"
                for qid, q in t.items():
                    if q["Type"] == "AWS::SQS::Queue" and dep.value(qid, "Arn") == arn:
                        entry["queueUrl"] = dep.value(qid)
            events.append(entry)
        if res["Type"] == "AWS::Scheduler::Schedule" and _ref_target((props.get("Target") or {}).get("Arn")) == logical:
            p = r.resolve(props)
            events.append({
                "type": "ScheduleV2",
                "logicalId": lid,
                "name": dep.value(lid),
                "arn": dep.value(lid, "Arn"),
                "expression": p["ScheduleExpression"],
                "roleArn": p["Target"].get("RoleArn"),
                "retryPolicy": p["Target"].get("RetryPolicy"),
                "flexibleTimeWindow": p.get("FlexibleTimeWindow"),
                "state": p.get("State", "ENABLED"),
                "input": p["Target"].get("Input"),
            })
        if res["Type"] == "AWS::ApiGatewayV2::Api":
            for path, methods in ((props.get("Body") or {}).get("paths") or {}).items():
                for method, spec in methods.items():
                    integ = (spec or {}).get("x-amazon-apigateway-integration") or {}
                    uri = integ.get("uri")
                    text = json.dumps(uri)
                    if re.search(r"\$\{" + re.escape(logical) + r"\.Arn\}", text) or _ref_target(uri) == logical:
                        verb = "ANY" if method == "x-amazon-apigateway-any-method" else method.upper()
                        stage = None
                        for sid, s in t.items():
                            if s["Type"] == "AWS::ApiGatewayV2::Stage" and _ref_target(s["Properties"].get("ApiId")) == lid:
                                stage = s["Properties"].get("StageName")
                        events.append({
                            "type": "HttpApi",
                            "apiLogicalId": lid,
                            "apiId": dep.value(lid),
                            "routeKey": f"{verb} {path}",
                            "path": path,
                            "method": verb,
                            "payloadFormatVersion": integ.get("payloadFormatVersion", "2.0"),
                            "stage": stage,
                        })
    return events


def forward_invocations(endpoint: str | None) -> None:
    """What Lambda does with an invocation of the seeded jobs function
    (authorized first, by authz, as lambda:InvokeFunction): runs it. Here
    it is handed to the Invoke API at `endpoint` (`cargo lambda watch`,
    whose function is vergence-wrapper in its Lambda mode) with the
    invocation type the caller asked for; its answer is the caller's.
    Without an endpoint such an invocation fails, as a function that
    cannot start would. Other functions keep moto's behaviour."""
    import urllib.request

    from moto.awslambda.models import LambdaBackend

    original = LambdaBackend.invoke

    def invoke(self: Any, function_name: str, qualifier: str | None, body: Any, headers: Any, response_headers: Any) -> Any:
        fn = self.get_function(function_name, qualifier)
        if fn.function_name != JOBS_FUNCTION:
            return original(self, function_name, qualifier, body, headers, response_headers)
        if not endpoint:
            raise RuntimeError(f"{JOBS_FUNCTION} runs nowhere: start the account with --lambda-endpoint")
        data = body.encode() if isinstance(body, str) else (body or b"")
        request = urllib.request.Request(
            f"{endpoint}/2015-03-31/functions/{JOBS_FUNCTION}/invocations",
            data=data,
            method="POST",
            headers={"X-Amz-Invocation-Type": headers.get("X-Amz-Invocation-Type") or "RequestResponse", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=int(fn.timeout) + 30) as answer:
            payload = answer.read()
            request_id = answer.headers.get("x-amzn-RequestId")
        if request_id:
            response_headers["x-amzn-RequestId"] = request_id
        response_headers["Content-Length"] = str(len(payload))
        return payload

    LambdaBackend.invoke = invoke


def detach_moto_event_source_mappings(region: str) -> None:
    """moto's SQS runs the mapped function on every SendMessage (and, when
    that fails, puts the messages back with their receive count raised):
    the harness polls the queue itself."""
    from moto.sqs.models import sqs_backends

    for queue in sqs_backends[ACCOUNT][region].queues.values():
        queue.lambda_event_source_mappings.clear()


def build(acct: Account, template: str, out: str, stack_name: str, params: dict[str, str], cluster_name: str) -> dict[str, Any]:
    import deploy
    from moto.awslambda.utils import get_backend as lambda_backend

    seeded = seed(acct, cluster_name)
    parameters = {
        "EcsClusterArns": seeded["ecsCluster"]["arn"],
        "EcsPassRoleArns": f"{seeded['taskRoleArn']},{seeded['executionRoleArn']}",
        "NotificationParameterPath": NOTIFICATION_PARAMETER_PATH,
        "NotificationSecretArns": seeded["notificationSecret"]["secretArn"],
        "LambdaFunctionArns": seeded["jobsFunction"]["arn"],
    }
    parameters.update(params)
    expanded = deploy.expand(template, parameters, CODE_BUCKET)
    parameters = {k: v for k, v in parameters.items() if k in expanded.get("Parameters", {})}
    s3 = acct.client("s3")
    for name, res in expanded["Resources"].items():
        if res["Type"] == "AWS::Lambda::Function":
            code = res["Properties"]["Code"]
            s3.put_object(Bucket=code["S3Bucket"], Key=code["S3Key"], Body=deploy.dummy_zip())
    dep = deploy.Deployer(acct.session(acct.admin), acct.endpoint, acct.region, stack_name, expanded, parameters)
    dep.deploy()
    detach_moto_event_source_mappings(acct.region)

    resources: dict[str, Any] = {}
    for lid, res in expanded["Resources"].items():
        entry: dict[str, Any] = {"type": res["Type"], "createdBy": dep.created_by.get(lid)}
        if lid in dep.completed:
            entry["propertiesByApi"] = dep.completed[lid]
        if not entry["createdBy"].startswith("skipped"):
            entry["physicalId"] = dep.value(lid)
            arn = dep.value(lid, "Arn") if res["Type"] not in ("AWS::Lambda::Permission", "AWS::ApiGatewayV2::Stage", "AWS::S3::BucketPolicy", "AWS::SQS::QueuePolicy", "AWS::Lambda::EventSourceMapping", "AWS::ApiGatewayV2::Api") else None
            if arn:
                entry["arn"] = arn
            if res["Type"] == "AWS::SQS::Queue":
                entry["url"] = dep.value(lid)
                entry["name"] = dep.value(lid, "QueueName")
            if res["Type"] == "AWS::ApiGatewayV2::Api":
                entry["apiEndpoint"] = dep.value(lid, "ApiEndpoint")
            if res["Type"] == "AWS::Lambda::Url":
                entry["url"] = dep.value(lid, "FunctionUrl")
                entry["targetArn"] = dep.value(lid, "FunctionArn")
                entry["authType"] = res["Properties"].get("AuthType")
        resources[lid] = entry

    functions: dict[str, Any] = {}
    lam = lambda_backend(ACCOUNT, acct.region)
    for lid, res in expanded["Resources"].items():
        if res["Type"] != "AWS::Lambda::Function" or dep.created_by.get(lid) != "cloudformation":
            continue
        fn = lam.get_function(dep.value(lid))
        key = (res.get("Metadata", {}).get("BuildProperties") or {}).get("Binary") or lid
        mine = dep.resolver.resolve(res["Properties"].get("Environment", {})).get("Variables", {})
        held = dict(fn.environment_vars)
        if {k: str(v) for k, v in mine.items()} != {k: str(v) for k, v in held.items()}:
            raise RuntimeError(f"{lid}: moto's environment {held} differs from the template's {mine}")
        role_arn = fn.role
        role_name = role_arn.split("/")[-1]
        creds = acct.assume_as_service(role_arn, f"{key}-function")
        functions[key] = {
            "logicalId": lid,
            "name": fn.function_name,
            "arn": fn.function_arn,
            "timeoutSeconds": int(fn.timeout),
            "memoryMb": int(fn.memory_size),
            "runtime": fn.run_time,
            "handler": fn.handler,
            "architectures": res["Properties"].get("Architectures", ["x86_64"]),
            "reservedConcurrency": res["Properties"].get("ReservedConcurrentExecutions"),
            "environment": {k: str(v) for k, v in held.items()},
            "role": {"name": role_name, "arn": role_arn},
            "credentials": creds,
            "granted": role_statements(role_name),
            "events": function_events(dep, lid),
        }

    contract = {
        "endpoint": acct.endpoint,
        "region": acct.region,
        "account": ACCOUNT,
        "stackName": stack_name,
        "secureTransport": acct.secure_transport,
        "admin": acct.admin,
        "functions": functions,
        "resources": resources,
        "outputs": dep.outputs(),
        "parameters": parameters,
        "seeded": seeded,
    }
    acct.contract = contract
    import authz

    authz.reset_decisions()  # the log starts with the functions' own calls
    tmp = out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(contract, f, indent=1, default=str)
    os.replace(tmp, out)
    return contract


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="where to write the contract JSON")
    ap.add_argument("--template", default=os.path.join(HERE, "..", "..", "template.yaml"))
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--stack-name", default="vergence")
    ap.add_argument("--ecs-cluster", default="vergence-jobs")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="a template parameter (repeatable)")
    ap.add_argument("--lambda-endpoint", help="the Invoke API running the seeded jobs function (cargo lambda watch)")
    ap.add_argument("--insecure-transport", action="store_true", help="aws:SecureTransport=false (then the bucket policy denies all S3 calls)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    params = {}
    for p in args.param:
        k, sep, v = p.partition("=")
        if not sep:
            ap.error(f"--param {p}: expected NAME=VALUE")
        params[k] = v

    # stdout carries only the `ready` line: anything moto prints goes to stderr
    real_stdout, sys.stdout = sys.stdout, sys.stderr
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    acct = Account(args.host, args.port, args.region, secure_transport=not args.insecure_transport)
    forward_invocations(args.lambda_endpoint)
    build(acct, os.path.abspath(args.template), args.out, args.stack_name, params, args.ecs_cluster)
    print(f"ready {args.out}", file=real_stdout, flush=True)
    while not stop.is_set():
        stop.wait(0.2)
    acct.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
