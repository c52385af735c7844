"""What `sam deploy` sends CloudFormation, made here with SAM's own translator.

testing/e2e/tests/e2e/stack.rs runs it with the workspace's .venv python (the samtranslator package the
pinned aws-sam-cli ships). Two commands, each printing one JSON document on stdout:

  transform TEMPLATE PARAMS_JSON OUT
      Translates TEMPLATE (template.yaml) as CloudFormation's AWS::Serverless-2016-10-31 transform
      does and writes the result to OUT (JSON), for cfn-lint and for the IAM test. CodeUri first
      becomes s3://tgq-e2e-code/<Function>.zip, as `sam package` rewrites it after uploading.

  deploy TEMPLATE PARAMS_JSON STACK
      The same transform, then what `sam deploy` makes CloudFormation do, on the endpoint of
      AWS_ENDPOINT_URL (moto): a placeholder zip per function uploaded where CodeUri points
      (moto's Lambda keeps the code and never runs it: it would need docker; the suite runs the
      real binaries under `cargo lambda watch`), the stack created from the transformed template,
      every resource's type and status, and the stack's outputs. Every event source mapping the
      stack made is then disabled: moto 5.2.5's SQS (moto/sqs/models.py, Queue.add_message)
      receives a queue's messages at each SendMessage for every *enabled* mapping and hands them
      to its Lambda, which needs docker, so they would be taken from the queue the real worker
      drains. The harness's mapping (testing/e2e/src/esm.rs) plays the disabled one's part.
      Resources of a type moto's CloudFormation cannot create (it would skip them, and fail
      the outputs that name them) are left out, with the outputs that name them, and listed
      as "left_out"; the test holds that list to the one it documents.

  key
      Creates a KMS key and prints its ARN, for SecretsKmsKeyArn.

PARAMS_JSON is an object of template parameter values; the others keep their defaults.
"""

import ast
import io
import re
import json
import os
import sys
import zipfile

import boto3
import yaml
from moto.cloudformation.parsing import resource_class_from_type
from samtranslator.translator.transform import transform

CODE_BUCKET = "tgq-e2e-code"


class NoManagedPolicies:
    """SAM asks IAM for managed policy ARNs only for a function's `Policies`; tgq's roles are explicit."""

    def load(self):
        return {}


def cfn_yaml(path):
    """template.yaml with CloudFormation's short forms (!Ref, !Sub, ...) read as their long forms."""

    class Loader(yaml.SafeLoader):
        pass

    def construct(loader, suffix, node):
        name = suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}"
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
            if suffix == "GetAtt":
                value = value.split(".", 1)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        return {name: value}

    Loader.add_multi_constructor("!", construct)
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=Loader)


def transformed(template_path, params):
    template = cfn_yaml(template_path)
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = f"s3://{CODE_BUCKET}/{name}.zip"
    return transform(template, params, NoManagedPolicies())


def names(value, logical_id):
    """Whether a template value refers to a resource (Ref, GetAtt or inside a Sub string)."""
    return re.search(rf"\b{logical_id}\b", json.dumps(value)) is not None


def without_unsupported(template):
    """The template less the resources moto cannot create, the resources and outputs that name them.

    Returns it with the left-out resources ({name: type}), the ones left out for naming one of
    them ({name: the one it names}) and the outputs left out.
    """
    left_out = {
        name: resource["Type"]
        for name, resource in template["Resources"].items()
        if resource_class_from_type(resource["Type"]) is None
    }
    by_reference = {}
    changed = True
    while changed:
        changed = False
        for name, resource in template["Resources"].items():
            if name in left_out or name in by_reference:
                continue
            for gone in list(left_out) + list(by_reference):
                if names(resource, gone):
                    by_reference[name] = gone
                    changed = True
                    break
    kept = dict(template)
    kept["Resources"] = {
        k: v for k, v in template["Resources"].items() if k not in left_out and k not in by_reference
    }
    kept["Outputs"] = {
        k: v
        for k, v in template.get("Outputs", {}).items()
        if not any(names(v, r) for r in list(left_out) + list(by_reference))
    }
    dropped = sorted(set(template.get("Outputs", {})) - set(kept["Outputs"]))
    return kept, left_out, by_reference, dropped


def deploy(template, params, stack):
    template, left_out, by_reference, dropped_outputs = without_unsupported(template)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=CODE_BUCKET)
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as z:
        z.writestr("bootstrap", "#!/bin/sh\nexit 1\n")
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Lambda::Function":
            s3.put_object(Bucket=CODE_BUCKET, Key=resource["Properties"]["Code"]["S3Key"], Body=code.getvalue())

    cfn = boto3.client("cloudformation")
    cfn.create_stack(
        StackName=stack,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": k, "ParameterValue": str(v)} for k, v in params.items()],
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
    )
    cfn.get_waiter("stack_create_complete").wait(StackName=stack, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    resources = cfn.describe_stack_resources(StackName=stack)["StackResources"]

    # moto lists a resource whose condition is false as an entry with neither name nor type.
    resources = [r for r in resources if "LogicalResourceId" in r]

    lam = boto3.client("lambda")
    disabled = []
    environment = {}
    for r in resources:
        if r["ResourceType"] == "AWS::Lambda::EventSourceMapping":
            lam.update_event_source_mapping(UUID=r["PhysicalResourceId"], Enabled=False)
            disabled.append(r["LogicalResourceId"])
        if r["ResourceType"] == "AWS::Lambda::Function":
            configuration = lam.get_function_configuration(FunctionName=r["PhysicalResourceId"])
            environment[r["LogicalResourceId"]] = configuration["Environment"]["Variables"]
    # Each role's inline policies as the stack made them (every intrinsic resolved).
    iam = boto3.client("iam")
    policies = {}
    for r in resources:
        if r["ResourceType"] == "AWS::IAM::Role":
            role = r["PhysicalResourceId"]
            statements = []
            for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
                document = iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"]
                # moto 5.2.5 keeps a document a stack made as Python's repr of it, not JSON.
                if isinstance(document, str):
                    document = ast.literal_eval(document)
                statements.extend(document["Statement"])
            policies[r["LogicalResourceId"]] = statements
    return {
        "status": described["StackStatus"],
        "policies": policies,
        "outputs": {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])},
        "resources": {
            r["LogicalResourceId"]: {
                "type": r["ResourceType"],
                "status": r["ResourceStatus"],
                "physical_id": r.get("PhysicalResourceId", ""),
            }
            for r in resources
        },
        "disabled_mappings": disabled,
        "environment": environment,
        "left_out": left_out,
        "left_out_by_reference": by_reference,
        "left_out_outputs": dropped_outputs,
    }


def main():
    # boto3 (and samtranslator's pseudo parameters through it) reads AWS_DEFAULT_REGION; the suite sets AWS_REGION.
    os.environ.setdefault("AWS_DEFAULT_REGION", os.environ.get("AWS_REGION", "us-east-1"))
    if sys.argv[1:2] == ["key"]:
        # A customer-managed key for the SecureString parameters (SecretsKmsKeyArn).
        print(json.dumps({"arn": boto3.client("kms").create_key()["KeyMetadata"]["Arn"]}))
        return
    command, template_path, params_json, target = sys.argv[1:5]
    params = json.loads(params_json)
    template = transformed(template_path, params)
    if command == "transform":
        with open(target, "w", encoding="utf-8") as f:
            json.dump(template, f, indent=1)
        print(json.dumps({"resources": {k: v["Type"] for k, v in template["Resources"].items()}}))
    elif command == "deploy":
        print(json.dumps(deploy(template, params, target)))
    else:
        sys.exit(f"unknown command {command}: transform or deploy")


if __name__ == "__main__":
    main()
