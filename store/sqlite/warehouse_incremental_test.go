package sqlite

import (
	"testing"

	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestWarehouseIncremental(t *testing.T) {
	storetest.RunWarehouseIncremental(t, openWarehouseT(t))
}

func TestWarehouseSeedData(t *testing.T) {
	storetest.RunWarehouseSeedData(t, openWarehouseT(t))
}
