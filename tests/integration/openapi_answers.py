"""Checks real answers of a running Lazarus against its own OpenAPI description.

usage: python3 openapi_answers.py SPEC ANSWERS

SPEC is /api/openapi.json as served; ANSWERS a JSON list of
{"method", "path" (the route's pattern), "status", "content_type", "body"}, where an
NDJSON body is given as the list of its lines. Each answer (each line) is validated with
JSON Schema 2020-12 — what OpenAPI 3.1 schemas are — against the schema the description
gives for that operation, status and content type. Prints every mismatch; exits 1 if any.
"""

import json
import sys

from jsonschema import Draft202012Validator


def main(spec_path, answers_path):
    with open(spec_path) as f:
        spec = json.load(f)
    with open(answers_path) as f:
        answers = json.load(f)
    problems = []
    for answer in answers:
        what = f"{answer['method'].upper()} {answer['path']} {answer['status']}"
        operation = spec["paths"][answer["path"]][answer["method"]]
        response = operation["responses"].get(str(answer["status"]))
        if response is None:
            problems.append(f"{what}: the description has no such answer")
            continue
        media = response.get("content", {}).get(answer["content_type"])
        if media is None:
            problems.append(f"{what}: not described as {answer['content_type']}")
            continue
        # The schema's references point into the description's components.
        schema = dict(media["schema"], components=spec["components"])
        validator = Draft202012Validator(schema)
        lines = answer["body"] if answer["content_type"] == "application/x-ndjson" else [answer["body"]]
        for line in lines:
            for error in validator.iter_errors(line):
                where = "/".join(str(p) for p in error.absolute_path)
                problems.append(f"{what}: at /{where}: {error.message[:300]}")
    for problem in problems:
        print(problem)
    print(f"{len(answers)} answers checked, {len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
