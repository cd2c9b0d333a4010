package config

import (
	"strings"
)

// MarkdownTable renders the options table as GitHub markdown with the
// columns key | flag | env | default | description, preceded by a row for
// the config file itself, for the README's configuration section. The
// output ends with a newline.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| key | flag | env | default | description |\n")
	b.WriteString("|---|---|---|---|---|\n")
	row := func(cells ...string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	row("—", "`--"+ConfigFlag+"`", "`"+ConfigEnv+"`", "`"+DefaultConfigFile+"`",
		"YAML config file with the keys below (and `namespaces:`); a missing default file is ignored, a missing named file is an error")
	for _, o := range table() {
		row("`"+o.Key+"`", "`--"+o.Flag+"`", "`"+o.Env+"`", "`"+o.Default+"`", o.Help)
	}
	row("`namespaces`", "—", "—", "`[]`",
		"YAML only: list of {name, uid, gid, mode (octal string), quota, block_size, model_id, model_revision, tokenizer_revision, kv_dtype, layout_version, tenant, kv_layout, tokens_per_block, prefill_us_per_token, restore_budget}")
	row("`pool_targets`", "—", "—", "`[]`",
		"YAML only: NVMe-oF targets attached at start, list of {transport (tcp, rdma), address, service_id (4420), nqn, host_nqn}; the first namespace found is the pool when `pool` is empty")
	return b.String()
}
