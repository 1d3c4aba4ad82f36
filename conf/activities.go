package conf

import "flashgate/conf/field"

// ActivityConfig is one entry of `activities:` (a sale), and the body of
// the admin API's create/update call. activity.Build turns it into the
// sale's Activity and checks it.
type ActivityConfig struct {
	ProductID string `yaml:"product_id" json:"productId"`
	Name      string `yaml:"name" json:"name"`
	// Price is a decimal string such as "99.00" (never a float).
	Price string `yaml:"price" json:"price"`
	Image string `yaml:"image" json:"image"`
	Stock int64  `yaml:"stock" json:"stock"`
	Limit int    `yaml:"limit" json:"limit"`
	// Start and End are RFC 3339 times or durations relative to process
	// start ("+30s"), which keeps demo configs valid whenever they run.
	Start string `yaml:"start" json:"start"`
	End   string `yaml:"end" json:"end"`
}

// validateActivities checks what only the list as a whole can tell; each
// entry is checked when the sale builds it (activity.Build), since its
// times are relative to the edge's start.
func validateActivities(errs *field.Errors, list []ActivityConfig) {
	seen := map[string]int{}
	for i, a := range list {
		if j, dup := seen[a.ProductID]; dup {
			errs.Add(field.Index("activities", i)+".product_id", "%q is already declared by activities[%d]", a.ProductID, j)
		}
		seen[a.ProductID] = i
	}
}
