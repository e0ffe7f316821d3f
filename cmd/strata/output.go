package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// printJSON prints v as the command's one JSON document.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows under a header, in aligned columns.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// humanSize prints n bytes with a binary unit: "64 KiB", "1.5 MiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	u := "KMGTPE"[exp]
	if n%div == 0 {
		return fmt.Sprintf("%d %ciB", n/div, u)
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), u)
}

// parseSize reads a size in bytes: "65536", "64K", "64k", "64KiB", "1M",
// "1MB", "2G". Units are binary.
func parseSize(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if strings.HasSuffix(u, "IB") {
		u = u[:len(u)-2]
	} else if strings.HasSuffix(u, "B") {
		u = u[:len(u)-1]
	}
	mult := int64(1)
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			mult, u = 1<<10, u[:n-1]
		case 'M':
			mult, u = 1<<20, u[:n-1]
		case 'G':
			mult, u = 1<<30, u[:n-1]
		}
	}
	v, err := strconv.ParseInt(strings.TrimSpace(u), 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes with an optional K, M or G", s)
	}
	return v * mult, nil
}

// sizeValue is a flag holding a size in bytes.
type sizeValue int64

func (v *sizeValue) String() string {
	if *v == 0 {
		return ""
	}
	return humanSize(int64(*v))
}

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

func (v *sizeValue) Type() string { return "size" }

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
