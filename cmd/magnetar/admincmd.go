package main

// `magnetar admin`: the Pulsar admin REST API from the command line, in
// the manner of pulsar-admin. Each command is one or a few requests (see
// docs/admin.md for the endpoint of each).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/magnetar-io/magnetar/broker"
)

var adminSettings = []setting{
	{"web-service-url", "http://localhost:8080", "url", "the broker's HTTP address, for its admin REST API (also --url and --admin-url, as in pulsar-admin)"},
}

const adminHelp = `
Output: text by default (lists one item a line, objects as a table of
flattened keys); -o json prints the JSON the server returned.

Exit codes: 0 success; 1 the broker refused the request (its reason and
the HTTP status are printed) or could not be reached; 2 a usage error.
`

// newAdminCommand builds `magnetar admin` and its command groups.
func newAdminCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Manage clusters, tenants, namespaces and topics through the admin REST API",
		Long: `Manage clusters, tenants, namespaces and topics through the broker's admin
REST API (Pulsar's /admin/v2 paths), like pulsar-admin.

Topics may be given in full (persistent://tenant/ns/topic), as tenant/ns/topic,
or by local name alone (my-topic is persistent://public/default/my-topic).
Namespaces are tenant/namespace.
` + adminHelp + configHelp,
		Example: `  magnetar admin tenants list
  magnetar admin --url http://broker-1:8080 namespaces list public
  magnetar admin topics stats my-topic -o json`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.PersistentFlags().StringP("output", "o", "text", "output format: text or json")
	cmd.AddCommand(
		newAdminClustersCommand(a),
		newAdminTenantsCommand(a),
		newAdminNamespacesCommand(a),
		newAdminTopicsCommand(a),
		newAdminBookiesCommand(a),
		newAdminBrokersCommand(a),
	)
	return cmd
}

// groupCommand is a command that only groups others: run alone it shows
// its help; with an argument that is no subcommand it is a usage error.
func groupCommand(use, short, example string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Example: example, Args: cobra.ArbitraryArgs, RunE: groupRun}
}

func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// adminRun is what an admin command's action gets: the client, where to
// write, and in which format.
type adminRun struct {
	ctx  context.Context
	c    *adminClient
	out  io.Writer
	json bool
	now  func() time.Time
}

// call sends a request. Its errors are runtime errors (exit code 1).
func (r *adminRun) call(method, path string, q url.Values, body any) (*adminResponse, error) {
	resp, err := r.c.do(r.ctx, method, path, q, body)
	if err != nil {
		if errors.Is(err, errUnreachable) {
			err = fmt.Errorf("%w (is magnetar running? set --url)", err)
		}
		return nil, runtimeError(err)
	}
	return resp, nil
}

// show prints a response: its JSON, or it as text. An answer without a
// body (a policy that is not set) is "(not set)" in text.
func (r *adminRun) show(resp *adminResponse) error {
	if r.json {
		return writeJSONIndented(r.out, resp.Body)
	}
	if len(bytes.TrimSpace(resp.Body)) == 0 {
		_, err := fmt.Fprintln(r.out, "(not set)")
		return err
	}
	return writeText(r.out, resp.Body)
}

// done reports a change: the server's JSON if -o json (if it sent any),
// else msg.
func (r *adminRun) done(resp *adminResponse, msg string, args ...any) error {
	if r.json {
		return writeJSONIndented(r.out, resp.Body)
	}
	_, err := fmt.Fprintf(r.out, msg+"\n", args...)
	return err
}

// adminLeaf makes a command that runs action with the admin client.
// Errors action returns are usage errors unless they are runtime errors
// (call's are).
func (a *app) adminLeaf(cmd *cobra.Command, action func(r *adminRun, args []string) error) *cobra.Command {
	if cmd.Long == "" {
		cmd.Long = cmd.Short + "."
	}
	cmd.Long += "\n" + adminHelp + configHelp
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		base, err := check(a.vals, adminSettings[0], parseAdminURL)
		if err != nil {
			return err
		}
		format, _ := cmd.Flags().GetString("output")
		if format != "text" && format != "json" {
			return fmt.Errorf("invalid --output %q: want text or json", format)
		}
		r := &adminRun{ctx: cmd.Context(), c: newAdminClient(base), out: a.stdout, json: format == "json", now: time.Now}
		if r.ctx == nil {
			r.ctx = context.Background()
		}
		return action(r, args)
	}
	a.addSettings(cmd, adminSettings)
	cmd.Flags().SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "url" || name == "admin-url" {
			name = "web-service-url"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

func parseAdminURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return "", errors.New("want http://host:port (or https://host:port)")
	}
	return strings.TrimSuffix(s, "/"), nil
}

// nameRE is what Pulsar allows in a tenant, namespace or cluster name.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_=:.-]+$`)

func checkName(what, s string) error {
	if !nameRE.MatchString(s) || s == "." || s == ".." {
		return fmt.Errorf("invalid %s name %q: want letters, digits and - _ = : .", what, s)
	}
	return nil
}

// namespacePath returns /admin/v2/namespaces/tenant/ns for "tenant/ns".
func namespacePath(ns string) (string, error) {
	t, n, ok := strings.Cut(ns, "/")
	if !ok || strings.Contains(n, "/") {
		return "", fmt.Errorf("invalid namespace %q: want tenant/namespace", ns)
	}
	if err := checkName("tenant", t); err != nil {
		return "", err
	}
	if err := checkName("namespace", n); err != nil {
		return "", err
	}
	return "/admin/v2/namespaces/" + t + "/" + n, nil
}

// adminTopic is a topic argument: its name and REST path.
type adminTopic struct {
	name broker.TopicName
	path string // /admin/v2/persistent/tenant/ns/topic
}

func parseAdminTopic(s string) (adminTopic, error) {
	t, err := broker.ParseTopicName(s)
	if err != nil {
		return adminTopic{}, err
	}
	return adminTopic{name: t, path: "/admin/v2/persistent/" + t.Tenant + "/" + t.Namespace + "/" + t.LocalName()}, nil
}

// sub is the path of a subscription of t.
func (t adminTopic) sub(name string) string { return t.path + "/subscription/" + url.PathEscape(name) }

func forceQuery(force bool) url.Values {
	if !force {
		return nil
	}
	return url.Values{"force": {"true"}}
}

// --- clusters ---------------------------------------------------------------

func newAdminClustersCommand(a *app) *cobra.Command {
	cmd := groupCommand("clusters", "List and show clusters",
		"  magnetar admin clusters list\n  magnetar admin clusters get standalone")
	cmd.AddCommand(
		a.adminLeaf(&cobra.Command{
			Use: "list", Short: "List the clusters", Args: cobra.NoArgs,
			Example: "  magnetar admin clusters list",
		}, func(r *adminRun, _ []string) error {
			resp, err := r.call("GET", "/admin/v2/clusters", nil, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
		a.adminLeaf(&cobra.Command{
			Use: "get CLUSTER", Short: "Show a cluster's service URLs", Args: cobra.ExactArgs(1),
			Example: "  magnetar admin clusters get standalone",
		}, func(r *adminRun, args []string) error {
			if err := checkName("cluster", args[0]); err != nil {
				return err
			}
			resp, err := r.call("GET", "/admin/v2/clusters/"+args[0], nil, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
	)
	return cmd
}

// --- tenants ----------------------------------------------------------------

// tenantInfo is Pulsar's TenantInfo.
type tenantInfo struct {
	AdminRoles      []string `json:"adminRoles"`
	AllowedClusters []string `json:"allowedClusters"`
}

func newAdminTenantsCommand(a *app) *cobra.Command {
	cmd := groupCommand("tenants", "Create, list, update and delete tenants",
		"  magnetar admin tenants list\n  magnetar admin tenants create acme --admin-roles alice")
	var roles, clusters []string
	var force bool
	tenantFlags := func(c *cobra.Command) *cobra.Command {
		c.Flags().StringSliceVarP(&roles, "admin-roles", "r", nil, "admin roles, comma-separated")
		c.Flags().StringSliceVarP(&clusters, "allowed-clusters", "c", nil, "allowed clusters, comma-separated (create: default all clusters)")
		return c
	}
	tenantArg := func(args []string) (string, error) {
		return "/admin/v2/tenants/" + args[0], checkName("tenant", args[0])
	}
	create := tenantFlags(&cobra.Command{
		Use: "create TENANT", Short: "Create a tenant", Args: cobra.ExactArgs(1),
		Example: "  magnetar admin tenants create acme --admin-roles alice,bob --allowed-clusters standalone",
	})
	update := tenantFlags(&cobra.Command{
		Use: "update TENANT", Short: "Change a tenant's admin roles or allowed clusters", Args: cobra.ExactArgs(1),
		Long:    "Change a tenant's admin roles or allowed clusters; what is not given is kept.",
		Example: "  magnetar admin tenants update acme --admin-roles carol",
	})
	del := &cobra.Command{
		Use: "delete TENANT", Short: "Delete a tenant (it must have no namespaces, unless --force)", Args: cobra.ExactArgs(1),
		Example: "  magnetar admin tenants delete acme",
	}
	del.Flags().BoolVar(&force, "force", false, "delete the tenant's namespaces and topics too")
	cmd.AddCommand(
		a.adminLeaf(&cobra.Command{
			Use: "list", Short: "List the tenants", Args: cobra.NoArgs,
			Example: "  magnetar admin tenants list",
		}, func(r *adminRun, _ []string) error {
			resp, err := r.call("GET", "/admin/v2/tenants", nil, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
		a.adminLeaf(&cobra.Command{
			Use: "get TENANT", Short: "Show a tenant's admin roles and allowed clusters", Args: cobra.ExactArgs(1),
			Example: "  magnetar admin tenants get public",
		}, func(r *adminRun, args []string) error {
			path, err := tenantArg(args)
			if err != nil {
				return err
			}
			resp, err := r.call("GET", path, nil, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
		a.adminLeaf(create, func(r *adminRun, args []string) error {
			path, err := tenantArg(args)
			if err != nil {
				return err
			}
			info := tenantInfo{AdminRoles: orEmpty(roles), AllowedClusters: clusters}
			if len(clusters) == 0 {
				// As pulsar-admin does: all the clusters there are.
				resp, err := r.call("GET", "/admin/v2/clusters", nil, nil)
				if err != nil {
					return err
				}
				if err := json.Unmarshal(resp.Body, &info.AllowedClusters); err != nil {
					return runtimeError(fmt.Errorf("GET /admin/v2/clusters: unexpected answer %q", resp.Body))
				}
			}
			resp, err := r.call("PUT", path, nil, info)
			if err != nil {
				return err
			}
			return r.done(resp, "created tenant %s", args[0])
		}),
		a.adminLeaf(update, func(r *adminRun, args []string) error {
			path, err := tenantArg(args)
			if err != nil {
				return err
			}
			fs := update.Flags()
			if !fs.Changed("admin-roles") && !fs.Changed("allowed-clusters") {
				return errors.New("nothing to change: give --admin-roles or --allowed-clusters")
			}
			resp, err := r.call("GET", path, nil, nil)
			if err != nil {
				return err
			}
			var info tenantInfo
			if err := json.Unmarshal(resp.Body, &info); err != nil {
				return runtimeError(fmt.Errorf("GET %s: unexpected answer %q", path, resp.Body))
			}
			if fs.Changed("admin-roles") {
				info.AdminRoles = orEmpty(roles)
			}
			if fs.Changed("allowed-clusters") {
				info.AllowedClusters = orEmpty(clusters)
			}
			if resp, err = r.call("POST", path, nil, info); err != nil {
				return err
			}
			return r.done(resp, "updated tenant %s", args[0])
		}),
		a.adminLeaf(del, func(r *adminRun, args []string) error {
			path, err := tenantArg(args)
			if err != nil {
				return err
			}
			resp, err := r.call("DELETE", path, forceQuery(force), nil)
			if err != nil {
				return err
			}
			return r.done(resp, "deleted tenant %s", args[0])
		}),
	)
	return cmd
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// --- namespaces -------------------------------------------------------------

func newAdminNamespacesCommand(a *app) *cobra.Command {
	cmd := groupCommand("namespaces", "Create, list and delete namespaces, and set their policies",
		"  magnetar admin namespaces list public\n  magnetar admin namespaces set-retention public/default --time 3d --size 10G")
	// simple is a command on one namespace that sends one request.
	simple := func(c *cobra.Command, method, suffix string, q func() url.Values, body func() (any, error), msg string) *cobra.Command {
		c.Args = cobra.ExactArgs(1)
		return a.adminLeaf(c, func(r *adminRun, args []string) error {
			path, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			var b any
			if body != nil {
				if b, err = body(); err != nil {
					return err
				}
			}
			var query url.Values
			if q != nil {
				query = q()
			}
			resp, err := r.call(method, path+suffix, query, b)
			if err != nil {
				return err
			}
			if msg == "" {
				return r.show(resp)
			}
			return r.done(resp, msg, args[0])
		})
	}

	var force bool
	del := &cobra.Command{Use: "delete TENANT/NAMESPACE", Short: "Delete a namespace (it must have no topics, unless --force)",
		Example: "  magnetar admin namespaces delete acme/orders --force"}
	del.Flags().BoolVar(&force, "force", false, "delete the namespace's topics too")

	var retTime, retSize string
	setRet := &cobra.Command{Use: "set-retention TENANT/NAMESPACE", Short: "Set how long and how much acknowledged data is kept",
		Long: `Set how long and how much acknowledged data is kept: --time (30m, 12h, 7d, 2w;
0 none, -1 forever) and --size (500M, 10G; 0 none, -1 unlimited); data is
kept while both limits allow.`,
		Example: "  magnetar admin namespaces set-retention public/default --time 3d --size 10G"}
	setRet.Flags().StringVar(&retTime, "time", "", "retention time: 30m, 12h, 7d, 2w (s, m, h, d, w, y); 0 none, -1 forever (required)")
	setRet.Flags().StringVar(&retSize, "size", "", "retention size: 500M, 10G (k, M, G, T; bytes without a unit); 0 none, -1 unlimited (required)")

	var ttl string
	setTTL := &cobra.Command{Use: "set-message-ttl TENANT/NAMESPACE", Short: "Expire unacknowledged messages after a time",
		Example: "  magnetar admin namespaces set-message-ttl public/default --ttl 1h"}
	setTTL.Flags().StringVar(&ttl, "ttl", "", "time to live: 3600 (seconds), 30m, 2h, 1d; 0 disables (required)")

	var bqSize, bqTime, bqPolicy, bqType string
	setBQ := &cobra.Command{Use: "set-backlog-quota TENANT/NAMESPACE", Short: "Limit the backlog of each subscription by size or age",
		Long: `Limit the backlog of each subscription by size (--limit-size: the
destination_storage quota) or by the age of its oldest message
(--limit-time: the message_age quota), and say what happens past it
(--policy): producer_request_hold (producers wait), producer_exception
(producers fail) or consumer_backlog_eviction (the oldest backlog is dropped).`,
		Example: `  magnetar admin namespaces set-backlog-quota public/default --limit-size 10G --policy producer_request_hold
  magnetar admin namespaces set-backlog-quota public/default --limit-time 1d --policy consumer_backlog_eviction`}
	setBQ.Flags().StringVar(&bqSize, "limit-size", "", "backlog size limit: 500M, 10G (k, M, G, T)")
	setBQ.Flags().StringVar(&bqTime, "limit-time", "", "backlog age limit: 30m, 12h, 7d")
	setBQ.Flags().StringVar(&bqPolicy, "policy", "", "producer_request_hold, producer_exception or consumer_backlog_eviction (required)")
	rmBQ := &cobra.Command{Use: "remove-backlog-quota TENANT/NAMESPACE", Short: "Remove a backlog quota",
		Example: "  magnetar admin namespaces remove-backlog-quota public/default --type message_age"}
	rmBQ.Flags().StringVar(&bqType, "type", "destination_storage", "quota to remove: destination_storage or message_age")

	var enable, disable bool
	enableFlags := func(c *cobra.Command) {
		c.Flags().BoolVar(&enable, "enable", false, "enable")
		c.Flags().BoolVar(&disable, "disable", false, "disable")
	}
	enabled := func() (bool, error) {
		if enable == disable {
			return false, errors.New("give one of --enable or --disable")
		}
		return enable, nil
	}
	setDedup := &cobra.Command{Use: "set-deduplication TENANT/NAMESPACE", Short: "Turn message deduplication on or off",
		Example: "  magnetar admin namespaces set-deduplication public/default --enable"}
	enableFlags(setDedup)

	var atcType string
	var atcPartitions int
	setATC := &cobra.Command{Use: "set-auto-topic-creation TENANT/NAMESPACE", Short: "Say whether and how a client's first use of a missing topic creates it",
		Example: `  magnetar admin namespaces set-auto-topic-creation public/default --enable --type partitioned --partitions 4
  magnetar admin namespaces set-auto-topic-creation public/default --disable`}
	enableFlags(setATC)
	setATC.Flags().StringVar(&atcType, "type", "non-partitioned", "topic type created: non-partitioned or partitioned")
	setATC.Flags().IntVar(&atcPartitions, "partitions", 0, "partitions of topics created partitioned")

	var persist [3]int
	setPersist := &cobra.Command{Use: "set-persistence TENANT/NAMESPACE", Short: "Set how the namespace's new ledgers are replicated",
		Long: `Set how the namespace's new ledgers are replicated: striped over --ensemble
bookies, each entry written to --write-quorum of them and acknowledged once
--ack-quorum have it on their journal (ensemble ≥ write quorum ≥ ack
quorum ≥ 1). Topics start new ledgers so replicated when they next load
(the namespace's topics on the broker asked are reloaded at once).`,
		Example: "  magnetar admin namespaces set-persistence public/default --ensemble 3 --write-quorum 2 --ack-quorum 2"}
	setPersist.Flags().IntVar(&persist[0], "ensemble", 2, "bookies each ledger is striped over (E)")
	setPersist.Flags().IntVar(&persist[1], "write-quorum", 2, "bookies each entry is written to (Qw)")
	setPersist.Flags().IntVar(&persist[2], "ack-quorum", 2, "bookies that must acknowledge an entry (Qa)")

	cmd.AddCommand(
		a.adminLeaf(&cobra.Command{
			Use: "list TENANT", Short: "List the namespaces of a tenant", Args: cobra.ExactArgs(1),
			Example: "  magnetar admin namespaces list public",
		}, func(r *adminRun, args []string) error {
			if err := checkName("tenant", args[0]); err != nil {
				return err
			}
			resp, err := r.call("GET", "/admin/v2/namespaces/"+args[0], nil, nil)
			if err != nil {
				return err
			}
			return r.show(resp)
		}),
		simple(&cobra.Command{Use: "create TENANT/NAMESPACE", Short: "Create a namespace",
			Example: "  magnetar admin namespaces create acme/orders"}, "PUT", "", nil, nil, "created namespace %s"),
		simple(del, "DELETE", "", func() url.Values { return forceQuery(force) }, nil, "deleted namespace %s"),
		simple(&cobra.Command{Use: "policies TENANT/NAMESPACE", Short: "Show all the policies of a namespace",
			Example: "  magnetar admin namespaces policies public/default"}, "GET", "", nil, nil, ""),
		simple(&cobra.Command{Use: "topics TENANT/NAMESPACE", Short: "List the topics of a namespace",
			Example: "  magnetar admin namespaces topics public/default"}, "GET", "/topics", nil, nil, ""),
		simple(setRet, "POST", "/retention", nil, func() (any, error) {
			return retentionBody(retTime, retSize)
		}, "set the retention of %s"),
		simple(&cobra.Command{Use: "get-retention TENANT/NAMESPACE", Short: "Show the retention of a namespace",
			Example: "  magnetar admin namespaces get-retention public/default"}, "GET", "/retention", nil, nil, ""),
		simple(&cobra.Command{Use: "remove-retention TENANT/NAMESPACE", Short: "Remove the retention of a namespace (the broker's default applies)",
			Example: "  magnetar admin namespaces remove-retention public/default"}, "DELETE", "/retention", nil, nil, "removed the retention of %s"),
		simple(setTTL, "POST", "/messageTTL", nil, func() (any, error) {
			if ttl == "" {
				return nil, errors.New("--ttl is required")
			}
			d, err := parseRelativeTime(ttl)
			if err != nil {
				return nil, fmt.Errorf("invalid --ttl %q: %w", ttl, err)
			}
			if d < 0 || d.Seconds() > math.MaxInt32 {
				return nil, fmt.Errorf("invalid --ttl %q: want 0 or more, up to 68 years", ttl)
			}
			return int64(d / time.Second), nil
		}, "set the message TTL of %s"),
		simple(&cobra.Command{Use: "get-message-ttl TENANT/NAMESPACE", Short: "Show the message TTL of a namespace, in seconds",
			Example: "  magnetar admin namespaces get-message-ttl public/default"}, "GET", "/messageTTL", nil, nil, ""),
		simple(&cobra.Command{Use: "remove-message-ttl TENANT/NAMESPACE", Short: "Remove the message TTL of a namespace",
			Example: "  magnetar admin namespaces remove-message-ttl public/default"}, "DELETE", "/messageTTL", nil, nil, "removed the message TTL of %s"),
		a.adminLeaf(setBQ, func(r *adminRun, args []string) error {
			path, err := namespacePath(args[0])
			if err != nil {
				return err
			}
			quotas, err := backlogQuotaBodies(bqSize, bqTime, bqPolicy)
			if err != nil {
				return err
			}
			var resp *adminResponse
			for _, q := range quotas {
				if resp, err = r.call("POST", path+"/backlogQuota", url.Values{"backlogQuotaType": {q.typ}}, q.body); err != nil {
					return err
				}
			}
			return r.done(resp, "set the backlog quota of %s", args[0])
		}),
		simple(&cobra.Command{Use: "get-backlog-quotas TENANT/NAMESPACE", Short: "Show the backlog quotas of a namespace",
			Example: "  magnetar admin namespaces get-backlog-quotas public/default"}, "GET", "/backlogQuotaMap", nil, nil, ""),
		simple(rmBQ, "DELETE", "/backlogQuota", func() url.Values { return url.Values{"backlogQuotaType": {bqType}} }, func() (any, error) {
			if bqType != "destination_storage" && bqType != "message_age" {
				return nil, fmt.Errorf("invalid --type %q: want destination_storage or message_age", bqType)
			}
			return nil, nil
		}, "removed the backlog quota of %s"),
		simple(setDedup, "POST", "/deduplication", nil, func() (any, error) {
			on, err := enabled()
			if err != nil {
				return nil, err
			}
			return on, nil
		}, "set the deduplication of %s"),
		simple(setATC, "POST", "/autoTopicCreation", nil, func() (any, error) {
			on, err := enabled()
			if err != nil {
				return nil, err
			}
			return autoTopicCreationBody(on, atcType, atcPartitions)
		}, "set the auto topic creation of %s"),
		simple(&cobra.Command{Use: "remove-auto-topic-creation TENANT/NAMESPACE", Short: "Remove the namespace's auto topic creation (the broker's setting applies)",
			Example: "  magnetar admin namespaces remove-auto-topic-creation public/default"}, "DELETE", "/autoTopicCreation", nil, nil, "removed the auto topic creation of %s"),
		simple(setPersist, "POST", "/persistence", nil, func() (any, error) {
			return map[string]any{"bookkeeperEnsemble": persist[0], "bookkeeperWriteQuorum": persist[1],
				"bookkeeperAckQuorum": persist[2], "managedLedgerMaxMarkDeleteRate": 0}, nil
		}, "set the persistence of %s"),
		simple(&cobra.Command{Use: "get-persistence TENANT/NAMESPACE", Short: "Show how the namespace's ledgers are replicated",
			Example: "  magnetar admin namespaces get-persistence public/default"}, "GET", "/persistence", nil, nil, ""),
		simple(&cobra.Command{Use: "remove-persistence TENANT/NAMESPACE", Short: "Remove the namespace's persistence (the broker's managed-ledger-* settings apply)",
			Example: "  magnetar admin namespaces remove-persistence public/default"}, "DELETE", "/persistence", nil, nil, "removed the persistence of %s"),
	)
	setBQ.Args = cobra.ExactArgs(1)
	cmd.AddCommand(a.bundleCommands()...)
	return cmd
}

// retentionBody is Pulsar's RetentionPolicies: minutes and MB, -1 for
// unlimited.
func retentionBody(timeArg, sizeArg string) (any, error) {
	if timeArg == "" || sizeArg == "" {
		return nil, errors.New("--time and --size are both required (-1: unlimited)")
	}
	minutes := int64(-1)
	if timeArg != "-1" {
		d, err := parseRelativeTime(timeArg)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("invalid --time %q: want 30m, 12h, 7d, 2w, 0 or -1", timeArg)
		}
		minutes = int64(d / time.Minute)
	}
	mb := int64(-1)
	if sizeArg != "-1" {
		b, err := parseSize(sizeArg)
		if err != nil {
			return nil, fmt.Errorf("invalid --size %q: %w", sizeArg, err)
		}
		mb = b >> 20
	}
	return map[string]int64{"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}, nil
}

type backlogQuota struct {
	typ  string // destination_storage or message_age
	body map[string]any
}

var backlogPolicies = map[string]bool{"producer_request_hold": true, "producer_exception": true, "consumer_backlog_eviction": true}

// backlogQuotaBodies are the quotas to set: one by size, one by age, or
// both. Pulsar's BacklogQuota: limitSize in bytes, limitTime in seconds,
// -1 for the limit the type does not use.
func backlogQuotaBodies(sizeArg, timeArg, policy string) ([]backlogQuota, error) {
	if !backlogPolicies[policy] {
		return nil, fmt.Errorf("invalid --policy %q: want producer_request_hold, producer_exception or consumer_backlog_eviction", policy)
	}
	if sizeArg == "" && timeArg == "" {
		return nil, errors.New("give --limit-size, --limit-time or both")
	}
	var out []backlogQuota
	if sizeArg != "" {
		b, err := parseSize(sizeArg)
		if err != nil {
			return nil, fmt.Errorf("invalid --limit-size %q: %w", sizeArg, err)
		}
		out = append(out, backlogQuota{"destination_storage", map[string]any{"limitSize": b, "limitTime": -1, "policy": policy}})
	}
	if timeArg != "" {
		d, err := parseRelativeTime(timeArg)
		if err != nil || d <= 0 || d.Seconds() > math.MaxInt32 {
			return nil, fmt.Errorf("invalid --limit-time %q: want a positive time: 30m, 12h, 7d", timeArg)
		}
		out = append(out, backlogQuota{"message_age", map[string]any{"limitSize": -1, "limitTime": int64(d / time.Second), "policy": policy}})
	}
	return out, nil
}

// autoTopicCreationBody is Pulsar's AutoTopicCreationOverride.
func autoTopicCreationBody(on bool, typ string, partitions int) (any, error) {
	body := map[string]any{"allowAutoTopicCreation": on, "topicType": typ}
	switch typ {
	case "non-partitioned":
		if partitions != 0 {
			return nil, errors.New("--partitions is for --type partitioned")
		}
	case "partitioned":
		if on && partitions < 1 {
			return nil, errors.New("--type partitioned needs --partitions 1 or more")
		}
		if partitions > 0 {
			body["defaultNumPartitions"] = partitions
		}
	default:
		return nil, fmt.Errorf("invalid --type %q: want non-partitioned or partitioned", typ)
	}
	return body, nil
}

// parseRelativeTime reads a time as Pulsar's tools do: a whole number
// with a unit s, m, h, d, w or y (seconds without one), or a Go duration
// (1h30m). -1 is returned as a negative duration.
func parseRelativeTime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty time")
	}
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour, 'y': 365 * 24 * time.Hour}
	num, unit := s, time.Second
	if u, ok := units[s[len(s)-1]]; ok {
		num, unit = s[:len(s)-1], u
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		if d, derr := time.ParseDuration(s); derr == nil {
			return d, nil
		}
		return 0, errors.New("want a number with a unit s, m, h, d, w or y (seconds without one)")
	}
	if n > int64(math.MaxInt64/unit) || n < -int64(math.MaxInt64/unit) {
		return 0, errors.New("too large")
	}
	return time.Duration(n) * unit, nil
}

// parseSize reads a size in bytes: a whole number with an optional unit
// k, M, G or T (powers of 1024; case-insensitive; a trailing B is allowed).
func parseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(s), "B"), "b")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'k', 'K':
			shift = 10
		case 'm', 'M':
			shift = 20
		case 'g', 'G':
			shift = 30
		case 't', 'T':
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, errors.New("want a size: 500M, 10G (k, M, G, T), or bytes")
	}
	return n << shift, nil
}
