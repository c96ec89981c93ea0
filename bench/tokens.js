// Token counts for docs/claude-code.md, "What it saves". Run by bench/tokens.sh:
//   node bench/tokens.js TOKENIZER_DIR PLAN_MD TOOLS_LIST_JSON
// The tokenizer is npm @anthropic-ai/tokenizer (its vocabulary ships in the package):
// an older Claude tokenizer, so every figure is a proxy, good for ratios.
"use strict";
const fs = require("fs");
const path = require("path");
const [tokenizerDir, planMd, toolsList] = process.argv.slice(2);
const { countTokens } = require(path.join(tokenizerDir, "node_modules/@anthropic-ai/tokenizer"));

const root = path.join(__dirname, "..");
const read = (p) => fs.readFileSync(path.isAbsolute(p) ? p : path.join(root, p), "utf8");
// A fixture's leading <!-- ... --> (its source and licence) is not part of the prompt.
const body = (p) => read(p).replace(/^<!--[\s\S]*?-->\n/, "");
const frontmatter = (text) => (text.match(/^---\n([\s\S]*?)\n---\n/) || ["", ""])[1];
const afterFrontmatter = (text) => text.replace(/^---\n[\s\S]*?\n---\n/, "");

const plugin = "integrations/claude-code";
const skills = ["plan-tasks", "dispatch-waves", "refine-phase", "loop-plan"];
const skillFile = (s) => read(`${plugin}/skills/${s}/SKILL.md`);
const command = read(`${plugin}/commands/plangate-status.md`);
const tools = JSON.parse(fs.readFileSync(toolsList, "utf8"));
const toolsJson = JSON.stringify(tools.result ? tools.result.tools : tools.tools);

const n = (text) => countTokens(text);
const rows = [];
const row = (group, what, tokens) => rows.push({ group, what, tokens });

row("plugin, always on", "13 tool definitions (`tools/list`, compact JSON)", n(toolsJson));
row("plugin, always on", "4 skill + 1 command frontmatter (name, description)",
    skills.map((s) => n(frontmatter(skillFile(s)))).reduce((a, b) => a + b, 0) + n(frontmatter(command)));
for (const s of skills) row("plugin, on invoke", `skill ${s} (body)`, n(afterFrontmatter(skillFile(s))));
row("plugin, on invoke", "command /plangate-status (body)", n(afterFrontmatter(command)));

const replaced = [
  ["atelier plan-wave-1 (DAG invariants, retry/escalate, team_pk, hand-off)", "bench/fixtures/atelier-plan-wave-1.md"],
  ["atelier pm-dispatch (wave barrier, pre-flight, cascade, termination)", "bench/fixtures/atelier-pm-dispatch.md"],
  ["AutoSkillit planner-refine-assignments (steps 1-7)", "bench/fixtures/autoskillit-planner-refine-assignments.md"],
  ["conductor loop-planner (plan.md, DAG, groups, checkpoints)", "bench/fixtures/conductor-loop-planner.md"],
];
for (const [what, file] of replaced) row("replaced prompt sections", what, n(body(file)));

// Output the model no longer writes: plan.md comes from plan_loop; the wave bookkeeping
// is the status table a PM re-writes after each wave (the 5-task, 3-wave cycle of
// .ci/plugin.sh), which ready_tasks / project_status now answer.
row("model output no longer written", "plan.md of examples/loop_plan_request.json", n(read(planMd)));
const statuses = [
  { "t-1": "done", "t-2": "failed", "t-3": "pending", "t-4": "abandoned", "t-5": "abandoned" },
  { "t-1": "done", "t-2": "failed", "t-3": "done", "t-4": "abandoned", "t-5": "abandoned" },
  { "t-1": "done", "t-2": "failed", "t-3": "done", "t-4": "abandoned", "t-5": "abandoned" },
];
const waves = { "t-1": 1, "t-2": 1, "t-3": 2, "t-4": 2, "t-5": 3 };
const bookkeeping = statuses.map((s, i) =>
  `Wave ${i + 1} closed.\n| task | wave | status |\n|---|---|---|\n` +
  Object.keys(s).map((t) => `| ${t} | ${waves[t]} | ${s[t]} |`).join("\n")).join("\n\n");
row("model output no longer written", "wave bookkeeping, 5 tasks x 3 waves", n(bookkeeping));

console.log(JSON.stringify(rows));
