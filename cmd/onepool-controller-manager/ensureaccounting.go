package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/onepool/onepool/accounting"
	"github.com/onepool/onepool/slurmrest"
)

// ensureAccountingUsage: `onepool-controller-manager ensure-accounting`,
// what the slurm chart's accounting Job runs after each install and
// upgrade.
const ensureAccountingUsage = `usage: onepool-controller-manager ensure-accounting --config FILE --slurmrest-url URL (--slurmrest-jwt-key-file FILE | --slurmrest-token-file FILE) [flags]

Keeps Slurm's accounting as FILE (JSON: cluster, qos, accounts with their
users' associations) says, through slurmrestd's slurmdbd endpoints: waits
until slurmdbd knows the cluster, makes what is missing, changes what
differs, deletes nothing, and prints each change. It then reads Slurm back
and fails if something still differs. Run again, it changes nothing.
`

type ensureAccountingConfig struct {
	config                                 string
	slurmURL, tokenFile, jwtKey, tokenUser string
	apiVersion                             string
	requestTimeout, timeout, poll          time.Duration
}

func parseEnsureAccountingFlags(args []string, stderr io.Writer) (ensureAccountingConfig, error) {
	var c ensureAccountingConfig
	fs := flag.NewFlagSet("ensure-accounting", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ensureAccountingUsage); fs.PrintDefaults() }
	fs.StringVar(&c.config, "config", "", "the accounting JSON (required)")
	fs.StringVar(&c.slurmURL, "slurmrest-url", "", "slurmrestd URL, e.g. http://slurm-restapi:6820 (required)")
	fs.StringVar(&c.tokenFile, "slurmrest-token-file", "", "file holding a slurmrestd JWT of an operator or admin (this or --slurmrest-jwt-key-file)")
	fs.StringVar(&c.jwtKey, "slurmrest-jwt-key-file", "", "file holding the cluster's jwt_hs256.key: mint tokens for --slurmrest-token-user")
	fs.StringVar(&c.tokenUser, "slurmrest-token-user", "slurm", "Slurm user of minted tokens (SlurmUser: slurmdbd's admin)")
	fs.StringVar(&c.apiVersion, "slurmrest-api-version", "", "REST API version to speak ("+strings.Join(slurmrest.APIVersions, ", ")+"); empty: the newest slurmrestd serves")
	fs.DurationVar(&c.requestTimeout, "slurmrest-timeout", 30*time.Second, "deadline of each slurmrestd request")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "how long to try in all, waiting for slurmrestd and the cluster included")
	fs.DurationVar(&c.poll, "poll", 5*time.Second, "how often to ask again while waiting")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.config == "" || c.slurmURL == "":
		return c, errors.New("--config and --slurmrest-url are required")
	case (c.tokenFile == "") == (c.jwtKey == ""):
		return c, errors.New("one of --slurmrest-token-file, --slurmrest-jwt-key-file is required")
	case c.timeout <= 0 || c.poll <= 0 || c.requestTimeout <= 0:
		return c, errors.New("--timeout, --poll and --slurmrest-timeout must be positive")
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, nil
}

// runEnsureAccounting is the ensure-accounting command: 0, or 1 with the
// reason on stderr, or 2 for bad flags or a bad config.
func runEnsureAccounting(args []string, stdout, stderr io.Writer) int {
	c, err := parseEnsureAccountingFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ensure-accounting: %v\n", err)
		return 2
	}
	want, err := accounting.Load(c.config)
	if err != nil {
		fmt.Fprintf(stderr, "ensure-accounting: %v\n", err)
		return 2
	}
	client, err := slurmrest.New(slurmrest.Config{URL: c.slurmURL, TokenFile: c.tokenFile, JWTKeyFile: c.jwtKey,
		TokenUser: c.tokenUser, APIVersion: c.apiVersion, Timeout: c.requestTimeout})
	if err != nil {
		fmt.Fprintf(stderr, "ensure-accounting: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	done, err := accounting.Ensure(ctx, client, want, accounting.Options{Poll: c.poll, Log: stdout})
	if err != nil {
		fmt.Fprintf(stderr, "ensure-accounting: cluster %s: %v\n", want.Cluster, err)
		return 1
	}
	v, _ := client.APIVersion(ctx)
	if len(done) == 0 {
		fmt.Fprintf(stdout, "cluster %s: Slurm's accounting matches the values (%d QOS, %d accounts); nothing changed (slurmrestd %s)\n",
			want.Cluster, len(want.QOS), len(want.Accounts), v)
	} else {
		fmt.Fprintf(stdout, "cluster %s: %d changes made; Slurm's accounting now matches the values (slurmrestd %s)\n", want.Cluster, len(done), v)
	}
	return 0
}
