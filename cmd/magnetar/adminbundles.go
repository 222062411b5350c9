package main

// `magnetar admin brokers` and the bundle commands of `magnetar admin
// namespaces`: ownership, unload, split (protocol/admin bundles.go).

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// bundleCommands are the namespace commands about bundles.
func (a *app) bundleCommands() []*cobra.Command {
	bundles := a.adminLeaf(&cobra.Command{
		Use: "bundles TENANT/NAMESPACE", Short: "List a namespace's bundles and the broker owning each",
		Long: `List a namespace's bundles (hash ranges of topic names) and the broker that
owns each; a bundle nobody owns goes to the least loaded broker on its next
lookup.`,
		Args: cobra.ExactArgs(1), Example: "  magnetar admin namespaces bundles public/default",
	}, func(r *adminRun, args []string) error {
		path, err := namespacePath(args[0])
		if err != nil {
			return err
		}
		resp, err := r.call("GET", path+"/ownership", nil, nil)
		if err != nil || r.json {
			if err != nil {
				return err
			}
			return r.show(resp)
		}
		var list []struct {
			Bundle, Owner string
		}
		if err := json.Unmarshal(resp.Body, &list); err != nil {
			return runtimeError(fmt.Errorf("unexpected answer %.200q: %w", resp.Body, err))
		}
		tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "BUNDLE\tOWNER")
		for _, b := range list {
			owner := b.Owner
			if owner == "" {
				owner = "(none)"
			}
			fmt.Fprintf(tw, "%s\t%s\n", b.Bundle, owner)
		}
		return tw.Flush()
	})

	var bundle string
	unload := a.adminLeaf(&cobra.Command{
		Use: "unload TENANT/NAMESPACE", Short: "Unload a namespace's bundles: another broker takes them",
		Long: `Unload a bundle of the namespace (--bundle), or all of them: its owner closes
its topics and gives it up, and the next lookup gives it to another broker
(the owner is passed over for a minute). Clients reconnect.`,
		Args: cobra.ExactArgs(1),
		Example: `  magnetar admin namespaces unload public/default --bundle 0x40000000_0x80000000
  magnetar admin namespaces unload public/default`,
	}, func(r *adminRun, args []string) error {
		path, err := namespacePath(args[0])
		if err != nil {
			return err
		}
		if bundle != "" {
			path += "/" + bundle
		}
		resp, err := r.call("PUT", path+"/unload", nil, nil)
		if err != nil {
			return err
		}
		if bundle != "" {
			return r.done(resp, "bundle %s of %s unloaded", bundle, args[0])
		}
		return r.done(resp, "namespace %s unloaded", args[0])
	})
	unload.Flags().StringVar(&bundle, "bundle", "", "the bundle to unload, 0xLOWER_0xUPPER (default: all)")

	var splitBundle string
	split := a.adminLeaf(&cobra.Command{
		Use: "split-bundle TENANT/NAMESPACE", Short: "Split a bundle in two equal halves",
		Long: `Split a bundle in two equal hash ranges; its owner gives it up and each half
is assigned on its next lookup, so the halves may go to different brokers.`,
		Args:    cobra.ExactArgs(1),
		Example: "  magnetar admin namespaces split-bundle public/default --bundle 0x00000000_0x40000000",
	}, func(r *adminRun, args []string) error {
		path, err := namespacePath(args[0])
		if err != nil {
			return err
		}
		if splitBundle == "" {
			return fmt.Errorf("--bundle is required")
		}
		resp, err := r.call("PUT", path+"/"+splitBundle+"/split", nil, nil)
		if err != nil {
			return err
		}
		return r.done(resp, "bundle %s of %s split", splitBundle, args[0])
	})
	split.Flags().StringVar(&splitBundle, "bundle", "", "the bundle to split, 0xLOWER_0xUPPER (required)")
	return []*cobra.Command{bundles, unload, split}
}

func newAdminBrokersCommand(a *app) *cobra.Command {
	cmd := groupCommand("brokers", "List a cluster's live brokers and their load", "  magnetar admin brokers list")
	var cluster string
	list := a.adminLeaf(&cobra.Command{
		Use: "list", Short: "List the live brokers of a cluster with their load",
		Long: `List the live brokers of a cluster: their addresses, Kafka node id, and last
load report (bundles owned, topics loaded, messages per second in and out,
CPU).`,
		Args: cobra.NoArgs, Example: "  magnetar admin brokers list\n  magnetar admin brokers list --cluster prod -o json",
	}, func(r *adminRun, _ []string) error {
		if cluster == "" {
			resp, err := r.call("GET", "/admin/v2/clusters", nil, nil)
			if err != nil {
				return err
			}
			var names []string
			if err := json.Unmarshal(resp.Body, &names); err != nil || len(names) != 1 {
				return fmt.Errorf("the broker knows clusters %s: give one with --cluster", resp.Body)
			}
			cluster = names[0]
		}
		if err := checkName("cluster", cluster); err != nil {
			return err
		}
		resp, err := r.call("GET", "/admin/v2/brokers/"+cluster+"/loads", nil, nil)
		if err != nil || r.json {
			if err != nil {
				return err
			}
			return r.show(resp)
		}
		var brokers []struct {
			ID        string `json:"id"`
			PulsarURL string `json:"pulsarServiceUrl"`
			WebURL    string `json:"webServiceUrl"`
			KafkaHost string `json:"kafkaHost"`
			KafkaPort int32  `json:"kafkaPort"`
			NodeID    int32  `json:"kafkaNodeId"`
			Load      struct {
				Bundles    int     `json:"bundles"`
				Topics     int     `json:"topics"`
				MsgRateIn  float64 `json:"msgRateIn"`
				MsgRateOut float64 `json:"msgRateOut"`
				CPU        float64 `json:"cpuPercent"`
			} `json:"load"`
		}
		if err := json.Unmarshal(resp.Body, &brokers); err != nil {
			return runtimeError(fmt.Errorf("unexpected answer %.200q: %w", resp.Body, err))
		}
		tw := tabwriter.NewWriter(r.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "BROKER\tHTTP\tKAFKA\tNODE ID\tBUNDLES\tTOPICS\tMSG/S IN\tMSG/S OUT\tCPU %")
		for _, b := range brokers {
			kafka := "-"
			if b.KafkaHost != "" {
				kafka = fmt.Sprintf("%s:%d", b.KafkaHost, b.KafkaPort)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.1f\n", b.ID, b.WebURL, kafka, b.NodeID,
				b.Load.Bundles, b.Load.Topics, b.Load.MsgRateIn, b.Load.MsgRateOut, b.Load.CPU)
		}
		return tw.Flush()
	})
	list.Flags().StringVar(&cluster, "cluster", "", "the cluster (default: the broker's, when it knows one)")
	cmd.AddCommand(list)
	return cmd
}
