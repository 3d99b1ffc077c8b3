"""template.yaml -> resources in moto, from the expanded template itself.

1. `expand`: the SAM transform (aws-sam-translator), offline: each
   function's CodeUri is rewritten to s3://<code bucket>/<LogicalId>.zip (as
   `sam package` would), managed policy names resolve from moto's copy of
   the AWS managed policies.
2. `deploy`: the expanded template's resources, in dependency order:
   - every type moto's CloudFormation implements goes through moto's
     CloudFormation (`CreateStack`, then `UpdateStack` adding the next layer);
   - the others are created with their service's API from the template's own
     properties (`CREATORS`), intrinsics resolved by `Resolver`.
   Resources are taken in layers: all CloudFormation-able resources whose
   dependencies exist go in one CreateStack/UpdateStack; then the API-created
   ones whose dependencies exist; and so on. In the templates handed to
   moto, references to API-created resources are replaced by their values
   (moto cannot resolve them), and `Fn::If`/`AWS::NoValue`/`Condition` are
   resolved beforehand (moto leaves `null`s in lists for `AWS::NoValue`);
   `Ref`, `Fn::GetAtt`, `Fn::Sub`, `Fn::Join`... among moto's own resources
   are resolved by moto.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import re
import zipfile
from typing import Any, Callable

log = logging.getLogger("stack.deploy")

ACCOUNT = "123456789012"


# ---------------------------------------------------------------- SAM transform


class ManagedPolicies:
    """The policy loader SAM asks for managed policy names: moto's copy of
    the AWS managed policies (name -> ARN)."""

    def __init__(self) -> None:
        from moto.iam.aws_managed_policies import aws_managed_policies_data

        data = json.loads(aws_managed_policies_data)
        self._map = {name: f"arn:aws:iam::aws:policy{p.get('Path', '/')}{name}" for name, p in data.items()}

    def load(self) -> dict[str, str]:
        return self._map


def expand(template_path: str, parameters: dict[str, str], code_bucket: str) -> dict[str, Any]:
    from samtranslator.translator.transform import transform
    from samtranslator.yaml_helper import yaml_parse

    with open(template_path) as f:
        template = yaml_parse(f.read())
    for name, res in template.get("Resources", {}).items():
        if res.get("Type") == "AWS::Serverless::Function":
            res.setdefault("Properties", {})["CodeUri"] = f"s3://{code_bucket}/{name}.zip"
    template = json.loads(json.dumps(template))
    return transform(template, dict(parameters), ManagedPolicies())


def dummy_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\necho 'not run: the harness runs the real binaries'\n")
    return buf.getvalue()


# ---------------------------------------------------------------- intrinsics


class Unresolved(Exception):
    pass


_NOVALUE = object()


class Resolver:
    """CloudFormation intrinsics over a template: Ref, Fn::GetAtt, Fn::Sub,
    Fn::Join, Fn::Select, Fn::Split, Fn::If, Fn::Equals/And/Or/Not,
    Fn::FindInMap, Fn::Base64, Fn::GetAZs, Condition, AWS::NoValue and the
    pseudo parameters. `lookup(logical_id, attribute_or_None)` gives
    resources' values."""

    def __init__(self, template: dict[str, Any], parameters: dict[str, str], region: str, stack_name: str, stack_id: str,
                 lookup: Callable[[str, str | None], Any]):
        self.template = template
        self.region = region
        self.lookup = lookup
        self.params: dict[str, Any] = {}
        for name, spec in template.get("Parameters", {}).items():
            raw = parameters.get(name, spec.get("Default"))
            if raw is None:
                raise ValueError(f"parameter {name} has no value and no default")
            if spec.get("Type") in ("CommaDelimitedList", "List<String>") or str(spec.get("Type", "")).startswith("List<"):
                value: Any = [] if str(raw) == "" else [x.strip() for x in str(raw).split(",")]
                # CloudFormation: an empty CommaDelimitedList is [""]
                value = value or [""]
            else:
                value = str(raw)
            self.params[name] = value
        self.pseudo = {
            "AWS::AccountId": ACCOUNT,
            "AWS::Region": region,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack_name,
            "AWS::StackId": stack_id,
            "AWS::NotificationARNs": [],
        }
        self._conditions: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self._cond(self.template["Conditions"][name]))
        return self._conditions[name]

    def _cond(self, node: Any) -> Any:
        if isinstance(node, dict) and len(node) == 1:
            (k, v), = node.items()
            if k == "Fn::Equals":
                a, b = (self.resolve(x) for x in v)
                return a == b
            if k == "Fn::Not":
                return not self._cond(v[0])
            if k == "Fn::And":
                return all(self._cond(x) for x in v)
            if k == "Fn::Or":
                return any(self._cond(x) for x in v)
            if k == "Condition":
                return self.condition(v)
        return self.resolve(node)

    def active(self, logical_id: str) -> bool:
        c = self.template["Resources"][logical_id].get("Condition")
        return True if c is None else self.condition(c)

    def ref(self, name: str) -> Any:
        if name in self.pseudo:
            return self.pseudo[name]
        if name == "AWS::NoValue":
            return _NOVALUE
        if name in self.params:
            return self.params[name]
        if name in self.template.get("Resources", {}):
            return self.lookup(name, None)
        raise Unresolved(f"Ref {name}")

    def getatt(self, name: str, attr: str) -> Any:
        return self.lookup(name, attr)

    def sub(self, text: str, variables: dict[str, Any]) -> str:
        def repl(m: re.Match[str]) -> str:
            inner = m.group(1)
            if inner.startswith("!"):
                return "${" + inner[1:] + "}"
            if inner in variables:
                v = variables[inner]
            elif "." in inner and inner.split(".", 1)[0] in self.template.get("Resources", {}):
                res, attr = inner.split(".", 1)
                v = self.getatt(res, attr)
            else:
                v = self.ref(inner)
            if isinstance(v, list):
                raise Unresolved(f"Fn::Sub of a list: {inner}")
            return str(v)

        return re.sub(r"\$\{([^}]+)\}", repl, text)

    def resolve(self, node: Any) -> Any:
        out = self._resolve(node)
        return None if out is _NOVALUE else out

    def _resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            items = [self._resolve(x) for x in node]
            return [x for x in items if x is not _NOVALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (k, v), = node.items()
            if k == "Ref":
                return self.ref(v)
            if k == "Fn::GetAtt":
                name, attr = (v.split(".", 1) if isinstance(v, str) else v)
                return self.getatt(name, self._resolve(attr))
            if k == "Fn::Sub":
                if isinstance(v, list):
                    text, variables = v
                    return self.sub(text, {n: self._resolve(x) for n, x in variables.items()})
                return self.sub(v, {})
            if k == "Fn::Join":
                sep, items = v
                return sep.join(str(x) for x in self._resolve(items))
            if k == "Fn::Select":
                i, items = v
                return self._resolve(items)[int(self._resolve(i))]
            if k == "Fn::Split":
                sep, text = v
                return str(self._resolve(text)).split(sep)
            if k == "Fn::If":
                cond, yes, no = v
                return self._resolve(yes if self.condition(cond) else no)
            if k in ("Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition"):
                return self._cond(node)
            if k == "Fn::FindInMap":
                m, a, b = (self._resolve(x) for x in v)
                return self.template["Mappings"][m][a][b]
            if k == "Fn::Base64":
                import base64

                return base64.b64encode(str(self._resolve(v)).encode()).decode()
            if k == "Fn::GetAZs":
                return [f"{self.region}{z}" for z in "abc"]
            if k.startswith("Fn::"):
                raise Unresolved(f"intrinsic {k} is not implemented")
        out = {}
        for k, v in node.items():
            r = self._resolve(v)
            if r is not _NOVALUE:
                out[k] = r
        return out


def references(node: Any, resources: set[str]) -> set[str]:
    """Logical ids a node refers to (Ref, Fn::GetAtt, Fn::Sub)."""
    found: set[str] = set()
    if isinstance(node, list):
        for x in node:
            found |= references(x, resources)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "Ref" and isinstance(v, str) and v in resources:
                found.add(v)
            elif k == "Fn::GetAtt":
                name = v.split(".", 1)[0] if isinstance(v, str) else v[0]
                if name in resources:
                    found.add(name)
            elif k == "Fn::Sub":
                text = v if isinstance(v, str) else v[0]
                for inner in re.findall(r"\$\{([^}!][^}]*)\}", text):
                    name = inner.split(".", 1)[0]
                    if name in resources and not (isinstance(v, list) and inner in v[1]):
                        found.add(name)
                if isinstance(v, list):
                    found |= references(v[1], resources)
            else:
                found |= references(v, resources)
    return found


def static_resolve(node: Any, r: Resolver) -> Any:
    """Resolves only Fn::If and AWS::NoValue (conditions are static), leaving
    every other intrinsic to moto."""
    if isinstance(node, list):
        items = [static_resolve(x, r) for x in node]
        return [x for x in items if x is not _NOVALUE]
    if isinstance(node, dict):
        if node == {"Ref": "AWS::NoValue"}:
            return _NOVALUE
        if len(node) == 1 and "Fn::If" in node:
            cond, yes, no = node["Fn::If"]
            return static_resolve(yes if r.condition(cond) else no, r)
        out = {}
        for k, v in node.items():
            s = static_resolve(v, r)
            if s is not _NOVALUE:
                out[k] = s
        return out
    return node


def substitute(node: Any, names: set[str], r: Resolver) -> Any:
    """Replaces references to `names` (API-created resources) by their values."""
    if isinstance(node, list):
        return [substitute(x, names, r) for x in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        (k, v), = node.items()
        if k == "Ref" and v in names:
            return r.ref(v)
        if k == "Fn::GetAtt":
            name, attr = v.split(".", 1) if isinstance(v, str) else v
            if name in names:
                return r.getatt(name, attr)
        if k == "Fn::Sub":
            text, variables = (v, {}) if isinstance(v, str) else (v[0], v[1])

            def repl(m: re.Match[str]) -> str:
                inner = m.group(1)
                name = inner.split(".", 1)[0]
                if inner in variables or inner.startswith("!") or name not in names:
                    return m.group(0)
                return str(r.getatt(name, inner.split(".", 1)[1]) if "." in inner else r.ref(name))

            text = re.sub(r"\$\{([^}]+)\}", repl, text)
            variables = {n: substitute(x, names, r) for n, x in variables.items()}
            return {"Fn::Sub": [text, variables] if variables else text}
    return {k: substitute(v, names, r) for k, v in node.items()}


# ---------------------------------------------------------------- resources created with API calls


class Direct:
    """A resource created with API calls: its Ref value and attributes."""

    def __init__(self, ref: Any, attrs: dict[str, Any] | None = None):
        self.ref = ref
        self.attrs = attrs or {}


def _physical_name(stack: str, logical: str, n: int = 12) -> str:
    import random
    import string

    return f"{stack}-{logical}-{''.join(random.choices(string.ascii_uppercase + string.digits, k=n))}"


def create_bucket_policy(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    ctx.client("s3").put_bucket_policy(Bucket=props["Bucket"], Policy=json.dumps(props["PolicyDocument"]))
    return Direct(props["Bucket"])


def create_queue_policy(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    for url in props["Queues"]:
        ctx.client("sqs").set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])})
    return Direct(_physical_name(ctx.stack_name, logical))


def create_alarm(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    args = dict(props)
    args.setdefault("AlarmName", _physical_name(ctx.stack_name, logical))
    ctx.client("cloudwatch").put_metric_alarm(**args)
    arn = f"arn:aws:cloudwatch:{ctx.region}:{ACCOUNT}:alarm:{args['AlarmName']}"
    return Direct(args["AlarmName"], {"Arn": arn})


def create_http_api(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    """AWS::ApiGatewayV2::Api. With a Body (what SAM emits) CloudFormation
    imports the OpenAPI document: one integration and one route per path
    and method, `x-amazon-apigateway-any-method` being the route `ANY`."""
    c = ctx.client("apigatewayv2")
    body = props.get("Body") or {}
    name = props.get("Name") or (body.get("info") or {}).get("title") or ctx.stack_name
    api = c.create_api(
        Name=name,
        ProtocolType=props.get("ProtocolType", "HTTP"),
        Description=props.get("Description") or (body.get("info") or {}).get("description", ""),
        **({"CorsConfiguration": props["CorsConfiguration"]} if "CorsConfiguration" in props else {}),
    )
    api_id = api["ApiId"]
    for path, methods in (body.get("paths") or {}).items():
        for method, spec in methods.items():
            integ = (spec or {}).get("x-amazon-apigateway-integration")
            if not integ:
                continue
            verb = "ANY" if method == "x-amazon-apigateway-any-method" else method.upper()
            i = c.create_integration(
                ApiId=api_id,
                IntegrationType=str(integ.get("type", "aws_proxy")).upper(),
                IntegrationMethod=integ.get("httpMethod", "POST"),
                IntegrationUri=integ["uri"],
                PayloadFormatVersion=integ.get("payloadFormatVersion", "2.0"),
            )
            c.create_route(ApiId=api_id, RouteKey=f"{verb} {path}", Target=f"integrations/{i['IntegrationId']}")
    endpoint = f"https://{api_id}.execute-api.{ctx.region}.amazonaws.com"
    return Direct(api_id, {"ApiEndpoint": endpoint, "ApiId": api_id})


def create_stage(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    args = {k: v for k, v in props.items() if k in ("ApiId", "StageName", "AutoDeploy", "DefaultRouteSettings", "Description", "StageVariables", "Tags", "RouteSettings", "AccessLogSettings")}
    ctx.client("apigatewayv2").create_stage(**args)
    return Direct(props["StageName"])


def create_function_url(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    """AWS::Lambda::Url (CreateFunctionUrlConfig). Its `FunctionUrl`
    attribute ends with a slash, as AWS's does (moto's has none). Nothing
    answers at that address: the harness serves the function URL itself."""
    args = {k: v for k, v in props.items() if k in ("AuthType", "Cors", "InvokeMode")}
    out = ctx.client("lambda").create_function_url_config(FunctionName=props["TargetFunctionArn"], **args)
    url = out["FunctionUrl"].rstrip("/") + "/"
    return Direct(out["FunctionArn"], {"FunctionUrl": url, "FunctionArn": out["FunctionArn"]})


def create_schedule(ctx: "Deployer", logical: str, props: dict[str, Any]) -> Direct:
    args = {k: v for k, v in props.items() if k in ("Name", "GroupName", "ScheduleExpression", "ScheduleExpressionTimezone", "FlexibleTimeWindow", "Target", "State", "Description", "StartDate", "EndDate", "KmsKeyArn")}
    args.setdefault("Name", _physical_name(ctx.stack_name, logical))
    out = ctx.client("scheduler").create_schedule(**args)
    return Direct(args["Name"], {"Arn": out["ScheduleArn"]})


# Properties moto 5.2.5's CloudFormation accepts but ignores, on types it
# creates: applied with API calls from the same resolved properties, right
# after the stack operation that created the resource.


def _lifecycle_rule(rule: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"ID": rule.get("Id", "rule"), "Status": rule.get("Status", "Enabled")}
    out["Filter"] = {"Prefix": rule.get("Prefix", "")}
    if "ExpirationInDays" in rule:
        out["Expiration"] = {"Days": int(rule["ExpirationInDays"])}
    if "AbortIncompleteMultipartUpload" in rule:
        out["AbortIncompleteMultipartUpload"] = {"DaysAfterInitiation": int(rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"])}
    if "NoncurrentVersionExpirationInDays" in rule:
        out["NoncurrentVersionExpiration"] = {"NoncurrentDays": int(rule["NoncurrentVersionExpirationInDays"])}
    return out


def _bool(v: Any) -> bool:
    return v is True or str(v).lower() == "true"


COMPLETERS: dict[str, dict[str, Callable[["Deployer", str, Any], None]]] = {
    "AWS::IAM::Role": {
        "ManagedPolicyArns": lambda d, name, arns: [d.client("iam").attach_role_policy(RoleName=name, PolicyArn=a) for a in arns],
    },
    "AWS::DynamoDB::Table": {
        "TimeToLiveSpecification": lambda d, name, v: d.client("dynamodb").update_time_to_live(
            TableName=name, TimeToLiveSpecification={"AttributeName": v["AttributeName"], "Enabled": _bool(v["Enabled"])}
        ),
        "PointInTimeRecoverySpecification": lambda d, name, v: d.client("dynamodb").update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": _bool(v.get("PointInTimeRecoveryEnabled"))}
        ),
    },
    "AWS::S3::Bucket": {
        "PublicAccessBlockConfiguration": lambda d, name, v: d.client("s3").put_public_access_block(
            Bucket=name, PublicAccessBlockConfiguration={k: _bool(x) for k, x in v.items()}
        ),
        "OwnershipControls": lambda d, name, v: d.client("s3").put_bucket_ownership_controls(Bucket=name, OwnershipControls=v),
        "LifecycleConfiguration": lambda d, name, v: d.client("s3").put_bucket_lifecycle_configuration(
            Bucket=name, LifecycleConfiguration={"Rules": [_lifecycle_rule(r) for r in v["Rules"]]}
        ),
    },
}


CREATORS: dict[str, Callable[["Deployer", str, dict[str, Any]], Direct]] = {
    "AWS::S3::BucketPolicy": create_bucket_policy,
    "AWS::SQS::QueuePolicy": create_queue_policy,
    "AWS::CloudWatch::Alarm": create_alarm,
    "AWS::ApiGatewayV2::Api": create_http_api,
    "AWS::ApiGatewayV2::Stage": create_stage,
    "AWS::Scheduler::Schedule": create_schedule,
    "AWS::Lambda::Url": create_function_url,
}


# ---------------------------------------------------------------- the deployment


class Deployer:
    def __init__(self, session: Any, endpoint: str, region: str, stack_name: str, template: dict[str, Any], parameters: dict[str, str]):
        from moto.cloudformation.parsing import get_model_map

        self.session = session
        self.endpoint = endpoint
        self.region = region
        self.stack_name = stack_name
        self.template = template
        self.parameters = parameters
        self.moto_types = set(get_model_map())
        self.direct: dict[str, Direct] = {}
        self.created_by: dict[str, str] = {}
        self.completed: dict[str, list[str]] = {}  # logical id -> properties applied by API
        self.stack_id: str | None = None
        self._clients: dict[str, Any] = {}
        self.resolver = Resolver(template, parameters, region, stack_name, "", self._lookup)

    def client(self, name: str) -> Any:
        if name not in self._clients:
            self._clients[name] = self.session.client(name, endpoint_url=self.endpoint, region_name=self.region)
        return self._clients[name]

    # moto's resource objects of the stack
    def moto_resource(self, logical: str) -> Any:
        from moto.cloudformation.models import cloudformation_backends

        stack = cloudformation_backends[ACCOUNT][self.region].get_stack(self.stack_id)
        return stack.resource_map._parsed_resources.get(logical)

    def _lookup(self, logical: str, attr: str | None) -> Any:
        if logical in self.direct:
            d = self.direct[logical]
            if attr is None:
                return d.ref
            if attr not in d.attrs:
                raise Unresolved(f"{logical}.{attr}")
            return d.attrs[attr]
        if self.created_by.get(logical) == "cloudformation":
            obj = self.moto_resource(logical)
            if obj is None:
                raise Unresolved(f"{logical} is not in moto's stack")
            return obj.physical_resource_id if attr is None else obj.get_cfn_attribute(attr)
        raise Unresolved(f"{logical} does not exist yet")

    def _moto_template(self, cfn: list[str], outputs: bool) -> str:
        r = self.resolver
        direct_names = set(self.direct)
        t: dict[str, Any] = {"AWSTemplateFormatVersion": "2010-09-09"}
        for section in ("Parameters", "Mappings", "Conditions"):
            if section in self.template:
                t[section] = self.template[section]
        res = {}
        for logical in cfn:
            body = copy.deepcopy(self.template["Resources"][logical])
            body.pop("Condition", None)
            deps = [d for d in _as_list(body.get("DependsOn")) if d not in direct_names and d in cfn]
            body.pop("DependsOn", None)
            if deps:
                body["DependsOn"] = deps
            body = static_resolve(body, r)
            res[logical] = substitute(body, direct_names, r)
        t["Resources"] = res
        if outputs and "Outputs" in self.template:
            t["Outputs"] = {
                k: substitute(static_resolve(v, r), direct_names, r)
                for k, v in self.template["Outputs"].items()
                if "Condition" not in v or r.condition(v["Condition"])
            }
        return json.dumps(t)

    def _stack_call(self, cfn: list[str], outputs: bool = False) -> None:
        cf = self.client("cloudformation")
        params = [{"ParameterKey": k, "ParameterValue": v} for k, v in self.parameters.items() if k in self.template.get("Parameters", {})]
        body = self._moto_template(cfn, outputs)
        caps = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]
        if self.stack_id is None:
            self.stack_id = cf.create_stack(StackName=self.stack_name, TemplateBody=body, Parameters=params, Capabilities=caps)["StackId"]
            self.resolver.pseudo["AWS::StackId"] = self.stack_id
        else:
            cf.update_stack(StackName=self.stack_name, TemplateBody=body, Parameters=params, Capabilities=caps)
        status = cf.describe_stacks(StackName=self.stack_name)["Stacks"][0]["StackStatus"]
        if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
            raise RuntimeError(f"moto's CloudFormation: stack {self.stack_name} is {status}")

    def deploy(self) -> None:
        r = self.resolver
        resources = self.template["Resources"]
        names = set(resources)
        for logical in resources:
            if not r.active(logical):
                self.created_by[logical] = "skipped (condition false)"
        active = [x for x in resources if x not in self.created_by]
        deps = {
            x: (references(static_resolve(resources[x].get("Properties", {}), r), names) | set(_as_list(resources[x].get("DependsOn")))) & set(active)
            for x in active
        }
        in_stack: list[str] = []
        pending = list(active)
        while pending:
            progressed = False
            # 1. every CloudFormation-able resource whose dependencies exist
            #    or come in the same stack operation
            batch: list[str] = []
            changed = True
            while changed:
                changed = False
                for x in pending:
                    if x in batch or resources[x]["Type"] not in self.moto_types:
                        continue
                    if all(d in self.created_by or d in batch for d in deps[x] - {x}):
                        batch.append(x)
                        changed = True
            if batch:
                in_stack.extend(batch)
                self._stack_call(in_stack)
                for x in batch:
                    self.created_by[x] = "cloudformation"
                    pending.remove(x)
                for x in batch:
                    self._complete(x)
                log.info("moto CloudFormation: %s", ", ".join(batch))
                progressed = True
            # 2. the API-created ones whose dependencies exist
            for x in list(pending):
                if resources[x]["Type"] in self.moto_types or not all(d in self.created_by for d in deps[x]):
                    continue
                creator = CREATORS.get(resources[x]["Type"])
                if creator is None:
                    raise RuntimeError(f"{x}: {resources[x]['Type']} is neither in moto's CloudFormation nor in CREATORS")
                props = r.resolve(resources[x].get("Properties", {}))
                self.direct[x] = creator(self, x, props)
                self.created_by[x] = "api"
                pending.remove(x)
                log.info("API: %s (%s)", x, resources[x]["Type"])
                progressed = True
            if not progressed:
                raise RuntimeError(f"cannot order the resources (a cycle?): {pending}")
        # Outputs on moto's stack too, now that everything exists.
        self._stack_call(in_stack, outputs=True)

    def _complete(self, logical: str) -> None:
        res = self.template["Resources"][logical]
        completers = COMPLETERS.get(res["Type"], {})
        props = res.get("Properties", {})
        for prop, apply in completers.items():
            if prop in props:
                value = self.resolver.resolve(props[prop])
                apply(self, self._lookup(logical, None), value)
                self.completed.setdefault(logical, []).append(prop)
                log.info("API: %s.%s (moto's CloudFormation ignores it)", logical, prop)

    # ---- reading back

    def value(self, logical: str, attr: str | None = None) -> Any:
        try:
            return self._lookup(logical, attr)
        except Exception:  # noqa: BLE001
            return None

    def outputs(self) -> dict[str, Any]:
        out = {}
        for k, v in (self.template.get("Outputs") or {}).items():
            if "Condition" in v and not self.resolver.condition(v["Condition"]):
                continue
            out[k] = self.resolver.resolve(v["Value"])
        return out


def _as_list(x: Any) -> list[Any]:
    if x is None:
        return []
    return x if isinstance(x, list) else [x]
