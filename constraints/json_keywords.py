"""The JSON Schema keywords by what we do with them: annotations (no assertion, skipped
wherever a schema's shape is read), the assertions we enforce, the ones we refuse."""

from __future__ import annotations

ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "$schema", "$id",
               "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
               "contentSchema", "$anchor", "$vocabulary", "$defs", "definitions"}
SUPPORTED = {"type", "enum", "const", "properties", "required", "additionalProperties", "items",
             "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern",
             "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf",
             "oneOf", "allOf", "$ref", "nullable", "uniqueItems", "multipleOf", "patternProperties",
             "propertyNames", "minProperties", "maxProperties", "dependentRequired", "not", "if",
             "then", "else"}
UNSUPPORTED = {"dependentSchemas", "dependencies",
               "unevaluatedProperties", "unevaluatedItems", "contains", "minContains",
               "maxContains", "$dynamicRef", "$dynamicAnchor",
               "$recursiveRef", "$recursiveAnchor"}
