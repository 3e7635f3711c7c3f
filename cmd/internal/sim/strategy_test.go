package sim

import (
	"strings"
	"testing"
)

// TestSelectStrategies: strategies are found by their one name, in the
// list's order, and an unknown name is an error naming it.
func TestSelectStrategies(t *testing.T) {
	got, err := SelectStrategies("recipe+budget, fixed,none,recipe+both")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "recipe+budget,fixed,none,recipe+both" {
		t.Errorf("SelectStrategies = %v", names)
	}
	if _, err := SelectStrategies("fixed,bogus"); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("SelectStrategies(bogus) error = %v, want one naming it", err)
	}
}
