package monitoring

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string     `json:"name"`
			Type       string     `json:"type"`
			Datasource datasource `json:"datasource"`
			Definition string     `json:"definition"`
			Query      struct {
				Query string `json:"query"`
			} `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int        `json:"id"`
	Type        string     `json:"type"`
	Title       string     `json:"title"`
	Description string     `json:"description"`
	Datasource  datasource `json:"datasource"`
	Targets     []struct {
		RefID      string     `json:"refId"`
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardJSON, err)
	}
	return d
}

// allPanels is every panel, those inside collapsed rows included.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// expressions is every PromQL expression of the dashboard, by where it is.
func (d dashboard) expressions() map[string]string {
	out := map[string]string{}
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out["panel "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Query.Query); m != nil {
			out["variable "+v.Name] = m[1]
		}
	}
	return out
}

// labelValues is Grafana's label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*\w+\s*\)$`)

// TestDashboard checks the dashboard's shape: it parses, panel ids are
// unique, every panel but a row has a query on the provisioned
// datasource, and the queue variable is there and used.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	var ds struct {
		Datasources []struct {
			Name string `yaml:"name"`
			Type string `yaml:"type"`
			UID  string `yaml:"uid"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, datasourceYML, &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].UID == "" {
		t.Fatalf("%s: want one prometheus datasource with a uid, got %+v", datasourceYML, ds.Datasources)
	}
	if got := ds.Datasources[0].URL; got != "http://prometheus:9090" {
		t.Errorf("%s: url %q, want http://prometheus:9090 (the compose service)", datasourceYML, got)
	}
	uid := ds.Datasources[0].UID

	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	var queueVar bool
	for _, v := range d.Templating.List {
		if v.Name == "queue" {
			queueVar = true
			if v.Datasource.UID != uid {
				t.Errorf("variable queue: datasource uid %q, want %q", v.Datasource.UID, uid)
			}
			if labelValues.FindStringSubmatch(v.Query.Query) == nil {
				t.Errorf("variable queue: query %q, want label_values(metric, queue)", v.Query.Query)
			}
		}
	}
	if !queueVar {
		t.Error("no queue template variable")
	}

	ids := map[int]string{}
	usesQueue := 0
	panels := d.allPanels()
	for _, p := range panels {
		if other, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q); want a unique non-zero id", p.Title, p.ID, other)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || p.Description == "" {
			t.Errorf("panel %d: title %q, description %q; want both", p.ID, p.Title, p.Description)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		if p.Datasource.UID != uid {
			t.Errorf("panel %q: datasource uid %q, want %q from %s", p.Title, p.Datasource.UID, uid, datasourceYML)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q, query %s: empty expression", p.Title, tg.RefID)
			}
			if tg.Datasource.UID != uid {
				t.Errorf("panel %q, query %s: datasource uid %q, want %q", p.Title, tg.RefID, tg.Datasource.UID, uid)
			}
			if strings.Contains(tg.Expr, "$queue") || strings.Contains(tg.Expr, "${queue}") {
				usesQueue++
			}
			if _, err := metricSelectors(tg.Expr); err != nil {
				t.Errorf("panel %q, query %s: %v", p.Title, tg.RefID, err)
			}
		}
	}
	if usesQueue == 0 {
		t.Error("no query uses $queue")
	}
	t.Logf("%d panels, %d queries use $queue", len(panels), usesQueue)
}

// TestDashboardProvider checks the provider reads the dashboards where
// compose mounts them.
func TestDashboardProvider(t *testing.T) {
	t.Parallel()
	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, dashProviderYML, &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" || prov.Providers[0].Options.Path != mountedDashboards {
		t.Errorf("%s: providers %+v, want one file provider with path %s", dashProviderYML, prov.Providers, mountedDashboards)
	}
}
