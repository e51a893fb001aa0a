// Baselines for bench/obfuscation.py: popular JavaScript profanity filters, each with its own English list
// and its documented default settings, asked whether each text is profane.
//
// Usage: node bench/js_filters/check.mjs MODULES_DIR < texts.json > flags.json
//   MODULES_DIR: the folder holding node_modules/ (bench/obfuscation.py --install-js-filters fills it from
//   package.json and package-lock.json beside this file).
//   stdin: a JSON array of strings. stdout: {"FILTER": {"version": "x.y.z", "flags": [bool, ...]} | {"error": "..."}}
//   with one flag per text, in order. A filter that cannot be loaded is reported with its error, not thrown.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";

const modulesDir = process.argv[2];
if (!modulesDir) {
  console.error("usage: node check.mjs MODULES_DIR < texts.json");
  process.exit(2);
}
const require = createRequire(join(resolve(modulesDir), "package.json"));
const texts = JSON.parse(readFileSync(0, "utf8"));

function version(name) {
  // Read the manifest from disk: some packages' "exports" do not expose package.json to require().
  return JSON.parse(readFileSync(join(resolve(modulesDir), "node_modules", name, "package.json"), "utf8")).version;
}

// Each entry builds a predicate text -> bool from the package's documented entry point.
const FILTERS = {
  obscenity: () => {
    const { RegExpMatcher, englishDataset, englishRecommendedTransformers } = require("obscenity");
    const matcher = new RegExpMatcher({ ...englishDataset.build(), ...englishRecommendedTransformers });
    return (text) => matcher.hasMatch(text);
  },
  "@2toad/profanity": () => {
    const { profanity } = require("@2toad/profanity");
    return (text) => profanity.exists(text);
  },
  "bad-words": () => {
    const { Filter } = require("bad-words");
    const filter = new Filter();
    return (text) => filter.isProfane(text);
  },
  "leo-profanity": () => {
    const filter = require("leo-profanity");
    return (text) => filter.check(text);
  },
};

const out = {};
for (const [name, build] of Object.entries(FILTERS)) {
  try {
    const isProfane = build();
    out[name] = { version: version(name), flags: texts.map((text) => Boolean(isProfane(text))) };
  } catch (error) {
    out[name] = { error: String(error && error.message ? error.message : error) };
  }
}
process.stdout.write(JSON.stringify(out));
